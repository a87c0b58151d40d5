"""The only module that knows the Redis key schema: metric specs and tallies.

Redis key schema (``<name>`` matches ``^[a-z][a-z0-9_.-]{0,63}$``, so it never
holds a brace or a colon; ``{...}`` is the Redis Cluster hash tag):

    ldp:{spec}:names                        SET    metric names
    ldp:{spec}:m:<name>                     HASH   latest -> n;  v:<n> -> spec JSON of
                                                   version n (without "version");
                                                   c:<n> -> canonical JSON (no params)
                                                   that decides "identical spec"
    ldp:{spec}:secret                       STRING 32 random bytes: the MAC key of the
                                                   digests below (unless LDP_SERVER_SECRET)
    ldp:{x:<name>:<v>}:slots                SET    "<epoch>:<shard>" of every tally hash
                                                   that holds reports (the read index)
    ldp:{m:<name>:<v>:<epoch>:<shard>}:t    HASH   "<i>" -> counter i of the tally vector,
                                                   "n" -> number of reports; kept
    ldp:{m:<name>:<v>:<epoch>:<shard>}:d    HASH   token digest (16 bytes) -> report-id
                                                   digest (8 bytes); EXPIREAT the end of
                                                   the retention window of the epoch
    ldp:{x:<name>:<v>}:i:<epoch>            SET    report-id digests (8 bytes) of the
                                                   reports refused as implausible_report
                                                   (collector.plausibility); its SCARD is
                                                   the poisoning flag of the metric-epoch
                                                   (``read_flags``); same EXPIREAT

What is never written: a true value (devices send only randomised reports), an
IP address, a user agent, a report id or a token in clear, a stable device id.
Digests are keyed MACs: BLAKE2b in its keyed mode (RFC 7693, the MAC that
BLAKE2 defines in place of HMAC; five times faster than HMAC-SHA256 here),
``blake2b(token, key=secret, digest_size=16, person=b"ldp-token")`` and
``blake2b(report_id, key=secret, digest_size=8, person=b"ldp-report-id")``,
so a leaked Redis dump cannot be matched against tokens or ids seen elsewhere
without the secret.

Shards.  The shard of a report is ``first 4 bytes of its token digest mod
shards``.  (Deriving it from the token digest rather than the report-id digest
keeps BOTH dedupe checks of a report in the slot of its counters: a retried
report has the same token and report id, and a second report with the same
token lands in the same shard, where it is refused as ``token_reused``.)
Readers sum all shards listed in the ``slots`` index, so changing the shard
count later only weakens the token check inside the epoch of the change.

Writes.  One Lua script per (metric, version, epoch, shard) slot applies all
of a batch's reports for that slot atomically: one HMGET of the token digests,
then for each report in order: if its token was already there (stored, or
earlier in the batch) with the same report id the report is a ``duplicate``
(already delivered), with another report id it is ``token_reused``; one HSET
stores token digest -> report-id digest for the accepted, and the merged
increments of the accepted reports are applied with one HINCRBY per distinct
counter.  On one node the same script adds its slot to the ``slots`` index, so
counters are never visible without their index entry; the scripts of all slots
of a batch go out in one pipeline (EVALSHA, loaded again on NOSCRIPT).  On a
Redis Cluster the index is in another slot: one SADD per index goes first, then
the scripts go out concurrently (redis-py refuses EVALSHA in a cluster
pipeline), each to the master of its slot, and ``ingest`` returns only once
every call has settled.

>>> store = Store(redis.asyncio.Redis.from_url(url))           # doctest: +SKIP
>>> spec, created = await store.create_metric(spec)             # doctest: +SKIP
>>> await store.ingest([ValidReport(spec, 20421, rid, tok, (3,))])  # doctest: +SKIP
['accepted']
>>> await store.read_tallies(spec, [20421])                     # doctest: +SKIP
{20421: ([0, 0, 0, 1], 1)}
>>> await store.read_flags(spec, [20421])                       # doctest: +SKIP
{20421: 0}

Poisoning signals for the aggregator: ``read_flags`` (distinct implausible
reports refused per epoch) and ``count_sum_z(spec.build(), vector, n)`` (the
z-score of a tally's sum against the honest law; ``SUM_Z_FLAG`` is the
threshold), both re-exported here from ``collector.plausibility``.
"""

from __future__ import annotations

import asyncio
import hashlib
import secrets
from collections import Counter, defaultdict
from collections.abc import Awaitable, Iterable, Sequence
from hashlib import blake2b
from typing import Any, Literal, NamedTuple, TypeAlias

import orjson
import redis.asyncio
import redis.exceptions
from redis.asyncio.cluster import ClusterNode, RedisCluster

from collector.plausibility import SUM_Z_FLAG, count_sum_z
from ldp_core.metric import MetricSpec

__all__ = [
    "REDIS_ERRORS",
    "SUM_Z_FLAG",
    "Outcome",
    "RedisClient",
    "Store",
    "ValidReport",
    "count_sum_z",
    "make_client",
]

RedisClient: TypeAlias = "redis.asyncio.Redis | RedisCluster"
Outcome = Literal["accepted", "duplicate", "token_reused"]
_OUTCOMES: tuple[Outcome, ...] = ("accepted", "duplicate", "token_reused")

#: Exceptions that mean "Redis is not reachable now" (the collector answers 503).
REDIS_ERRORS: tuple[type[Exception], ...] = (
    redis.exceptions.RedisError,
    redis.exceptions.RedisClusterException,
    OSError,
    TimeoutError,
)

_SPEC_NAMES = "ldp:{spec}:names"
_SPEC_SECRET = "ldp:{spec}:secret"  # noqa: S105 - a key name, not a secret

# KEYS[1] tally hash, KEYS[2] dedupe hash, KEYS[3] (one node only) the slots index.
# ARGV[1] EXPIREAT of the dedupe hash; ARGV[2] R, the number of reports;
# ARGV[3] R records of 24 bytes: token digest (16) then report-id digest (8);
# ARGV[4] the counters of each report, "i,j;k;...;" (";" after each report), read
#         only to take back the counters of refused reports;
# ARGV[5] the merged increments of all R reports, "index:count,index:count,...";
# ARGV[6] with KEYS[3]: this slot's member of the index, "epoch:shard".
# Returns a string of R characters: "0" accepted, "1" duplicate, "2" token reused.
_INGEST_LUA = """
local r = tonumber(ARGV[2])
local records = ARGV[3]
local toks, rids = {}, {}
for i = 1, r do
  local at = 24 * (i - 1)
  toks[i] = string.sub(records, at + 1, at + 16)
  rids[i] = string.sub(records, at + 17, at + 24)
end
local held = redis.call('HMGET', KEYS[2], unpack(toks))
local out, refused, fresh, seen = {}, {}, {}, {}
local accepted = 0
for i = 1, r do
  local tok, rid = toks[i], rids[i]
  local have = held[i] or seen[tok]
  if have then
    if have == rid then out[i] = '1' else out[i] = '2' end
    refused[i] = true
  else
    seen[tok] = rid
    out[i] = '0'
    accepted = accepted + 1
    fresh[#fresh + 1] = tok
    fresh[#fresh + 1] = rid
  end
end
if accepted == 0 then return table.concat(out) end
redis.call('HSET', KEYS[2], unpack(fresh))
local inc = {}
for idx, n in string.gmatch(ARGV[5], '(%d+):(%d+)') do inc[idx] = tonumber(n) end
if accepted < r then
  local i = 1
  for counters in string.gmatch(ARGV[4], '([^;]*);') do
    if refused[i] then
      for idx in string.gmatch(counters, '%d+') do inc[idx] = inc[idx] - 1 end
    end
    i = i + 1
    if i > r then break end
  end
end
for idx, v in pairs(inc) do
  if v ~= 0 then redis.call('HINCRBY', KEYS[1], idx, v) end
end
redis.call('HINCRBY', KEYS[1], 'n', accepted)
redis.call('EXPIREAT', KEYS[2], ARGV[1])
if KEYS[3] then redis.call('SADD', KEYS[3], ARGV[6]) end
return table.concat(out)
"""

# KEYS[1] spec hash, KEYS[2] names set; ARGV[1] canonical JSON, ARGV[2] stored JSON,
# ARGV[3] name.  Returns {version, created (1) or existing (0)}.
_CREATE_LUA = """
local n = tonumber(redis.call('HGET', KEYS[1], 'latest') or '0')
if n > 0 and redis.call('HGET', KEYS[1], 'c:' .. n) == ARGV[1] then return {n, 0} end
n = n + 1
redis.call('HSET', KEYS[1], 'latest', n, 'c:' .. n, ARGV[1], 'v:' .. n, ARGV[2])
redis.call('SADD', KEYS[2], ARGV[3])
return {n, 1}
"""

# KEYS[1] names set.  Returns name, version, stored JSON for the latest version of each.
_LIST_LUA = """
local out = {}
for _, name in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local key = 'ldp:{spec}:m:' .. name
  local n = redis.call('HGET', key, 'latest')
  if n then
    out[#out + 1] = name
    out[#out + 1] = n
    out[#out + 1] = redis.call('HGET', key, 'v:' .. n)
  end
end
return out
"""

_INGEST_SHA = hashlib.sha1(_INGEST_LUA.encode()).hexdigest()  # noqa: S324 - Redis script id


async def _settle(calls: Iterable[Awaitable[Any]]) -> list[Any]:
    """Await every call, then raise the first failure.

    Plain ``asyncio.gather`` raises at the first failure and leaves the other
    calls running: a 503 would go out while writes of the same batch (redis-py
    retrying a slot whose master restarts) still land afterwards.  Here, when
    ``ingest`` returns or raises, nothing it sent is still in flight.
    """
    results = await asyncio.gather(*calls, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return results


def make_client(
    redis_url: str | None = None,
    cluster_nodes: Sequence[tuple[str, int]] | None = None,
    timeout: float = 2.0,
) -> RedisClient:
    """A redis.asyncio client for a URL, or a RedisCluster client for (host, port) nodes.

    Neither connects yet: the first command does, so a collector starts while
    Redis is down and recovers without a restart once it is back.
    """
    if cluster_nodes:
        return RedisCluster(
            startup_nodes=[ClusterNode(host, port) for host, port in cluster_nodes],
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
        )
    if not redis_url:
        raise ValueError("give a redis URL or cluster nodes")
    return redis.asyncio.Redis.from_url(
        redis_url,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        health_check_interval=5,
    )


class ValidReport(NamedTuple):
    """A report that passed every check that does not need Redis.

    An immutable NamedTuple rather than a frozen dataclass: a batch builds up to
    a thousand of them and a NamedTuple is built five times faster.
    """

    spec: MetricSpec
    epoch: int
    report_id: str
    token: str
    counters: tuple[int, ...]


def _tag(spec: MetricSpec, epoch: int, shard: int) -> str:
    return f"ldp:{{m:{spec.name}:{spec.version}:{epoch}:{shard}}}"


def _index_key(name: str, version: int) -> str:
    return f"ldp:{{x:{name}:{version}}}:slots"


def _implausible_key(name: str, version: int, epoch: int) -> str:
    return f"ldp:{{x:{name}:{version}}}:i:{epoch}"


def _spec_key(name: str) -> str:
    return f"ldp:{{spec}}:m:{name}"


def _mac_key(secret: bytes) -> bytes:
    """The secret as a BLAKE2b key (at most 64 bytes)."""
    return secret if len(secret) <= 64 else blake2b(secret).digest()


def _counter_text(counters: list[tuple[int, ...]]) -> str:
    """ "i,j;k;" for the Lua script; one join when every report has one counter (GRR, OLH)."""
    if all(len(cs) == 1 for cs in counters):
        return ";".join([str(cs[0]) for cs in counters]) + ";"
    return "".join(",".join(map(str, cs)) + ";" for cs in counters)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _canonical(spec_json: dict[str, Any]) -> bytes:
    return orjson.dumps(spec_json, option=orjson.OPT_SORT_KEYS)


class Store:
    """Metric specs and tallies in Redis (single node or Redis Cluster).

    ``shards`` spreads each (metric, version, epoch) over that many slots;
    ``retention_seconds`` is how long after an epoch ends its dedupe state is
    kept (the collector refuses reports older than that anyway); ``secret``
    keys the digests (else one is created once and kept in Redis).
    """

    def __init__(
        self,
        client: RedisClient,
        *,
        shards: int = 4,
        retention_seconds: int = 31 * 86400,
        secret: bytes | None = None,
    ) -> None:
        if shards < 1:
            raise ValueError(f"shards must be >= 1, got {shards}")
        self.client = client
        self.shards = shards
        self.retention_seconds = retention_seconds
        self._secret = None if secret is None else _mac_key(secret)
        self._specs: dict[tuple[str, int], MetricSpec] = {}
        # EVALSHA, loaded again by redis-py on NOSCRIPT.
        self._create = client.register_script(_CREATE_LUA)
        self._list = client.register_script(_LIST_LUA)

    @classmethod
    def connect(
        cls,
        redis_url: str | None = None,
        cluster_nodes: Sequence[tuple[str, int]] | None = None,
        **kwargs: Any,
    ) -> Store:
        """A Store over a new client (see ``make_client``)."""
        return cls(make_client(redis_url, cluster_nodes), **kwargs)

    async def close(self) -> None:
        await self.client.aclose()

    @property
    def is_cluster(self) -> bool:
        return isinstance(self.client, RedisCluster)

    # -- health ----------------------------------------------------------------------

    async def ping(self) -> bool:
        """Redis answers (read-only: what the aggregator checks)."""
        return bool(await self.client.ping())

    async def ready(self) -> bool:
        """Redis answers, the ingest script is loaded (loaded if missing) and the
        digest secret is known (created if missing): the collector's readiness."""
        try:
            await self.client.ping()
            await self._load_scripts()
            await self._get_secret()
        except REDIS_ERRORS:
            return False
        return True

    async def _load_scripts(self) -> None:
        exists = await self.client.script_exists(_INGEST_SHA)
        flags = exists if isinstance(exists, list) else [exists]
        if not all(flags):
            await self.client.script_load(_INGEST_LUA)

    async def _get_secret(self) -> bytes:
        if self._secret is None:
            await self.client.set(_SPEC_SECRET, secrets.token_bytes(32), nx=True)
            stored = await self.client.get(_SPEC_SECRET)
            if not isinstance(stored, bytes) or len(stored) < 16:
                raise RuntimeError("the server secret in Redis is missing or too short")
            self._secret = _mac_key(stored)
        return self._secret

    # -- metric specs ----------------------------------------------------------------

    async def create_metric(self, spec: MetricSpec) -> tuple[MetricSpec, bool]:
        """Store ``spec`` (its version is ignored) -> (stored spec, created?).

        A new name gets version 1; a spec identical to the latest version of its
        name returns that version (created False); any other gets latest + 1.
        """
        body = spec.to_json()
        del body["version"]
        canonical = {k: v for k, v in body.items() if k != "params"}
        reply = await self._create(
            keys=[_spec_key(spec.name), _SPEC_NAMES],
            args=[_canonical(canonical), orjson.dumps(body), spec.name],
        )
        version, created = int(reply[0]), bool(int(reply[1]))
        stored = await self.get_metric(spec.name, version)
        assert stored is not None
        return stored, created

    def _parse(self, name: str, version: int, raw: bytes | str) -> MetricSpec:
        key = (name, version)
        if key not in self._specs:
            data = orjson.loads(raw)
            data["version"] = version
            self._specs[key] = MetricSpec.from_json(data)
        return self._specs[key]

    async def get_metric(self, name: str, version: int | None = None) -> MetricSpec | None:
        """One version of a metric (the latest if ``version`` is None), or None."""
        if version is not None and (name, version) in self._specs:
            return self._specs[(name, version)]
        key = _spec_key(name)
        if version is None:
            latest = await self.client.hget(key, "latest")
            if latest is None:
                return None
            version = int(latest)
        raw = await self.client.hget(key, f"v:{version}")
        return None if raw is None else self._parse(name, version, raw)

    async def get_metrics(
        self, wanted: Iterable[tuple[str, int]]
    ) -> dict[tuple[str, int], MetricSpec]:
        """Many (name, version) at once (cached ones without a round trip)."""
        wanted = list(dict.fromkeys(wanted))
        out = {k: self._specs[k] for k in wanted if k in self._specs}
        missing = [k for k in wanted if k not in out]
        if missing:
            pipe = self.client.pipeline(transaction=False)
            for name, version in missing:
                pipe.hget(_spec_key(name), f"v:{version}")
            for (name, version), raw in zip(missing, await pipe.execute(), strict=True):
                if raw is not None:
                    out[(name, version)] = self._parse(name, version, raw)
        return out

    async def known_names(self, names: Iterable[str]) -> set[str]:
        """Which of ``names`` are registered metrics (one round trip)."""
        ordered = sorted(set(names))
        if not ordered:
            return set()
        flags = await self.client.smismember(_SPEC_NAMES, ordered)
        return {name for name, flag in zip(ordered, flags, strict=True) if flag}

    async def list_metrics(self) -> list[MetricSpec]:
        """The latest version of every metric, by name."""
        flat = await self._list(keys=[_SPEC_NAMES])
        out = [
            self._parse(_text(flat[i]), int(flat[i + 1]), flat[i + 2])
            for i in range(0, len(flat), 3)
        ]
        return sorted(out, key=lambda s: s.name)

    # -- ingest ------------------------------------------------------------------------

    async def ingest(self, reports: Sequence[ValidReport]) -> list[Outcome]:
        """Count each report at most once; one outcome per report, in order.

        Raises redis.exceptions.RedisError (or OSError) if Redis is unreachable;
        then nothing of this call may have been applied, or some slots may have:
        a retry of the same batch is safe because duplicates count once.
        """
        if not reports:
            return []
        secret = await self._get_secret()
        shards = self.shards
        # Grouped by (name, version, epoch, shard): hashing a MetricSpec hashes its domain.
        groups: dict[tuple[str, int, int, int], list[int]] = defaultdict(list)
        spec_of: dict[tuple[str, int], MetricSpec] = {}
        records: list[bytes] = []
        # Keyed once per batch: copying a keyed hasher skips the key block per report.
        tok_mac = blake2b(key=secret, digest_size=16, person=b"ldp-token")
        rid_mac = blake2b(key=secret, digest_size=8, person=b"ldp-report-id")
        for position, report in enumerate(reports):
            h = tok_mac.copy()
            h.update(report.token.encode())
            tok = h.digest()
            h = rid_mac.copy()
            h.update(report.report_id.encode())
            records.append(tok + h.digest())
            shard = int.from_bytes(tok[:4], "big") % shards
            spec = report.spec
            spec_of[(spec.name, spec.version)] = spec
            groups[(spec.name, spec.version, report.epoch, shard)].append(position)
        calls: list[list[Any]] = []
        slots: list[tuple[str, str]] = []  # per call: the index key and this slot's member
        for (name, version, epoch, shard), positions in groups.items():
            spec = spec_of[(name, version)]
            slots.append((_index_key(name, version), f"{epoch}:{shard}"))
            tag = _tag(spec, epoch, shard)
            expire_at = (epoch + 1) * spec.epoch_seconds + self.retention_seconds
            counters = [reports[p].counters for p in positions]
            merged = Counter(c for cs in counters for c in cs)
            calls.append(
                [
                    f"{tag}:t",
                    f"{tag}:d",
                    expire_at,
                    len(positions),
                    b"".join(records[p] for p in positions),
                    _counter_text(counters),
                    ",".join(f"{c}:{n}" for c, n in merged.items()),
                ]
            )
        replies = await self._run_ingest(slots, calls)
        outcomes: list[Outcome] = ["accepted"] * len(reports)
        for positions, codes in zip(groups.values(), replies, strict=True):
            for position, code in zip(positions, codes, strict=True):
                outcomes[position] = _OUTCOMES[code - 48]  # b"0" is 48
        return outcomes

    async def record_implausible(self, reports: Sequence[ValidReport]) -> None:
        """Count reports refused as implausible_report: each distinct report id once
        per (metric, version, epoch), so a retried batch does not count them again."""
        if not reports:
            return
        secret = await self._get_secret()
        members: dict[tuple[str, int, int], set[bytes]] = defaultdict(set)
        expiry: dict[tuple[str, int, int], int] = {}
        for report in reports:
            spec = report.spec
            key = (spec.name, spec.version, report.epoch)
            members[key].add(
                blake2b(
                    report.report_id.encode(), key=secret, digest_size=8, person=b"ldp-report-id"
                ).digest()
            )
            expiry[key] = (report.epoch + 1) * spec.epoch_seconds + self.retention_seconds
        pipe = self.client.pipeline(transaction=False)
        for key, digests in members.items():
            name = _implausible_key(*key)
            pipe.sadd(name, *sorted(digests))
            pipe.expireat(name, expiry[key])
        await pipe.execute()

    async def read_flags(self, spec: MetricSpec, epochs: Iterable[int]) -> dict[int, int]:
        """epoch -> number of distinct reports refused as implausible_report (0 if none)."""
        wanted = sorted(set(epochs))
        if not wanted:
            return {}
        pipe = self.client.pipeline(transaction=False)
        for epoch in wanted:
            pipe.scard(_implausible_key(spec.name, spec.version, epoch))
        counts = await pipe.execute()
        return {epoch: int(c) for epoch, c in zip(wanted, counts, strict=True)}

    async def _run_ingest(
        self, slots: list[tuple[str, str]], calls: list[list[Any]]
    ) -> list[bytes]:
        if self.is_cluster:
            # The index lives in another slot than the counters, so it cannot be
            # written by their script; and redis-py refuses EVALSHA inside a cluster
            # pipeline: the slots' calls go out concurrently, each to its master.
            index: dict[str, set[str]] = defaultdict(set)
            for key, member in slots:
                index[key].add(member)
            await _settle(self.client.sadd(k, *sorted(m)) for k, m in index.items())
            return await _settle(self._evalsha(args) for args in calls)
        # One node: each script also lists its slot in the index (KEYS[3], ARGV[6]).
        for attempt in (0, 1):
            pipe = self.client.pipeline(transaction=False)
            for (key, member), (tally, dedupe, *args) in zip(slots, calls, strict=True):
                pipe.evalsha(_INGEST_SHA, 3, tally, dedupe, key, *args, member)
            try:
                return list(await pipe.execute())
            except redis.exceptions.NoScriptError:
                if attempt:
                    raise
                await self.client.script_load(_INGEST_LUA)
        raise AssertionError("unreachable")

    async def _evalsha(self, args: list[Any]) -> Any:
        try:
            return await self.client.evalsha(_INGEST_SHA, 2, *args)
        except redis.exceptions.NoScriptError:
            await self.client.script_load(_INGEST_LUA)
            return await self.client.evalsha(_INGEST_SHA, 2, *args)

    # -- read side (the aggregator) ------------------------------------------------------

    async def _slots(self, spec: MetricSpec) -> list[tuple[int, int]]:
        members = await self.client.smembers(_index_key(spec.name, spec.version))
        pairs = []
        for m in members:
            epoch, _, shard = _text(m).partition(":")
            pairs.append((int(epoch), int(shard)))
        return sorted(pairs)

    async def epochs_with_data(self, spec: MetricSpec) -> list[int]:
        """Epochs of this metric version that hold at least one accepted report."""
        return sorted({epoch for epoch, _ in await self._slots(spec)})

    async def read_tallies(
        self, spec: MetricSpec, epochs: Iterable[int]
    ) -> dict[int, tuple[list[int], int]]:
        """epoch -> (tally vector summed over shards, report count); empty epochs omitted."""
        wanted = set(epochs)
        slots = [(e, s) for e, s in await self._slots(spec) if e in wanted]
        if not slots:
            return {}
        pipe = self.client.pipeline(transaction=False)
        for epoch, shard in slots:
            pipe.hgetall(f"{_tag(spec, epoch, shard)}:t")
        size = spec.build().num_counters
        out: dict[int, tuple[list[int], int]] = {}
        for (epoch, _), fields in zip(slots, await pipe.execute(), strict=True):
            if not fields:
                continue
            vector, n = out.get(epoch, ([0] * size, 0))
            for key, value in fields.items():
                if key == b"n":
                    n += int(value)
                else:
                    vector[int(key)] += int(value)
            out[epoch] = (vector, n)
        return {e: out[e] for e in sorted(out) if out[e][1] > 0}
