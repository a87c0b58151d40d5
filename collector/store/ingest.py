"""Writing a batch: each report counted at most once, atomically per slot.

See ``collector.store.schema`` for the keys and the Lua script; here the
reports are digested (keyed BLAKE2b), grouped by (metric, version, epoch,
shard) and sent in one script call for all slots on a single node, or one
call per slot on a Redis Cluster, the calls of one master in one pipeline, the
masters concurrently (``ingest`` returns only once every call has settled).

>>> _counter_text([(3,), (1,)]), _counter_text([(0, 2), ()])
('3;1;', '0,2;;')
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from hashlib import blake2b
from typing import Any, Literal, NamedTuple

import redis.exceptions

from collector.store.base import StoreBase
from collector.store.group import ALONE, GroupCommit
from collector.store.schema import (
    INGEST_BATCH_LUA,
    INGEST_BATCH_SHA,
    INGEST_SHA,
    implausible_key,
    index_key,
    tally_tag,
)
from ldp_core.metric import MetricSpec

__all__ = ["STATE_MARGIN_SECONDS", "Ingest", "Outcome", "ValidReport"]

Outcome = Literal["accepted", "duplicate"]
_OUTCOMES: tuple[Outcome, ...] = ("accepted", "duplicate")

#: Seconds the per-report state outlives the acceptance window: clock
#: differences between collector instances and Redis.
STATE_MARGIN_SECONDS = 3600


class ValidReport(NamedTuple):
    """A report that passed every check that does not need Redis.

    An immutable NamedTuple rather than a frozen dataclass: a batch builds up to
    a thousand of them and a NamedTuple is built five times faster.
    """

    spec: MetricSpec
    epoch: int
    report_id: str
    token: str  #: the wire token; after ``collector.tokens`` its nonce (hex)
    counters: tuple[int, ...]



def _counter_text(counters: list[tuple[int, ...]]) -> str:
    """ "i,j;k;" for the Lua script; one join when every report has one counter (GRR, OLH)."""
    if all(len(cs) == 1 for cs in counters):
        return ";".join([str(cs[0]) for cs in counters]) + ";"
    return "".join(",".join(map(str, cs)) + ";" for cs in counters)



class Ingest(StoreBase):
    """The write side: ``ingest``, ``ingest_grouped`` and ``record_implausible``."""

    _group: GroupCommit[ValidReport, Outcome] | None = None

    async def ingest_grouped(self, reports: Sequence[ValidReport]) -> list[Outcome]:
        """``ingest``, the reports of concurrent callers written by one call
        (``collector.store.group``: at most 1000 reports, one caller's never split; a
        failure raises in every caller of the group).  The route's write.  A batch of
        ``ALONE`` (100) reports or more is written alone, at once."""
        if len(reports) >= ALONE:
            return await self.ingest(reports)
        if self._group is None:
            self._group = GroupCommit(lambda group: self.ingest(group))
        return await self._group.submit(reports)

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
        # Keyed once per batch: copying a keyed hasher skips the key block per token;
        # one digest per distinct token (a device's reports of ~20 metrics share one).
        fresh = blake2b(key=secret, digest_size=12, person=b"ldp-spent").copy
        of_token: dict[str, bytes] = {}
        for token in dict.fromkeys(r.token for r in reports):
            h = fresh()
            h.update(token.encode())
            of_token[token] = h.digest()
        digests = [of_token[r.token] for r in reports]
        records = [d[4:] for d in digests]
        # Grouped by (name, version, epoch, shard): hashing a MetricSpec hashes its domain.
        groups: dict[tuple[str, int, int, int], list[int]] = defaultdict(list)
        spec_of: dict[tuple[str, int], MetricSpec] = {}
        for position, (report, digest) in enumerate(zip(reports, digests, strict=True)):
            spec = report.spec
            name, version = spec.name, spec.version
            spec_of[(name, version)] = spec
            groups[(name, version, report.epoch,
                    int.from_bytes(digest[:4], "big") % shards)].append(position)
        calls: list[list[Any]] = []
        slots: list[tuple[str, str]] = []  # per call: the index key and this slot's member
        for (name, version, epoch, shard), positions in groups.items():
            spec = spec_of[(name, version)]
            slots.append((index_key(name, version), f"{epoch}:{shard}"))
            tag = tally_tag(spec, epoch, shard)
            expire_at = ((epoch + 1) * spec.epoch_seconds + self.acceptance_seconds
                         + STATE_MARGIN_SECONDS)
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
                    (epoch + 1) * spec.epoch_seconds + self.tally_retention_seconds,
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
            name = implausible_key(*key)
            pipe.sadd(name, *sorted(digests))
            pipe.expireat(name, expiry[key])
        await pipe.execute()

    async def _run_ingest(
        self, slots: list[tuple[str, str]], calls: list[list[Any]]
    ) -> list[bytes]:
        if self.is_cluster:
            # The index lives in another slot than the counters, so it cannot be
            # written by their script: the index first (counters are never visible
            # without their entry), then the scripts; each round one pipeline per
            # master (``StoreBase._per_master``).
            index: dict[str, set[str]] = defaultdict(set)
            for key, member in slots:
                index[key].add(member)
            await self._per_master([("SADD", k, *sorted(m)) for k, m in index.items()])
            return await self._per_master([("EVALSHA", INGEST_SHA, 2, *args) for args in calls])
        # One node: ONE script call applies every slot of the batch, each also listing
        # its slot in the index (KEYS[3j+3]): one Lua call instead of one per slot.
        keys: list[str] = []
        argv: list[Any] = [len(calls)]
        for (key, member), (tally, dedupe, *args) in zip(slots, calls, strict=True):
            keys += (tally, dedupe, key)
            argv += (*args, member)
        for attempt in (0, 1):
            try:
                return list(await self.client.evalsha(INGEST_BATCH_SHA, len(keys), *keys, *argv))
            except redis.exceptions.NoScriptError:
                if attempt:
                    raise
                await self.client.script_load(INGEST_BATCH_LUA)
        raise AssertionError("unreachable")

    # -- read side (the aggregator) ------------------------------------------------------
