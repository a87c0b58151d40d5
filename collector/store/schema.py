"""The Redis key schema of the collector: key names, digests and the Lua scripts.

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
                                                   "n" -> number of reports; EXPIREAT
                                                   the end of the epoch + the counters'
                                                   retention (LDP_TALLY_RETENTION_DAYS)
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

>>> index_key("browser", 2), implausible_key("browser", 2, 20421)
('ldp:{x:browser:2}:slots', 'ldp:{x:browser:2}:i:20421')
>>> spec_key("browser")
'ldp:{spec}:m:browser'
"""

from __future__ import annotations

import hashlib
from hashlib import blake2b
from typing import Any

import orjson

from ldp_core.metric import MetricSpec

__all__ = [
    "CREATE_LUA",
    "INGEST_LUA",
    "INGEST_SHA",
    "LIST_LUA",
    "SPEC_NAMES",
    "SPEC_SECRET",
    "as_text",
    "canonical_json",
    "implausible_key",
    "index_key",
    "mac_key",
    "spec_key",
    "tally_tag",
]

SPEC_NAMES = "ldp:{spec}:names"
SPEC_SECRET = "ldp:{spec}:secret"  # noqa: S105 - a key name, not a secret

# KEYS[1] tally hash, KEYS[2] dedupe hash, KEYS[3] (one node only) the slots index.
# ARGV[1] EXPIREAT of the dedupe hash; ARGV[2] R, the number of reports;
# ARGV[3] R records of 24 bytes: token digest (16) then report-id digest (8);
# ARGV[4] the counters of each report, "i,j;k;...;" (";" after each report), read
#         only to take back the counters of refused reports;
# ARGV[5] the merged increments of all R reports, "index:count,index:count,...";
# ARGV[6] EXPIREAT of the tally hash (the counters' retention);
# ARGV[7] with KEYS[3]: this slot's member of the index, "epoch:shard".
# Returns a string of R characters: "0" accepted, "1" duplicate, "2" token reused.
INGEST_LUA = """
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
redis.call('EXPIREAT', KEYS[1], ARGV[6])
if KEYS[3] then redis.call('SADD', KEYS[3], ARGV[7]) end
return table.concat(out)
"""

# KEYS[1] spec hash, KEYS[2] names set; ARGV[1] canonical JSON, ARGV[2] stored JSON,
# ARGV[3] name.  Returns {version, created (1) or existing (0)}.
CREATE_LUA = """
local n = tonumber(redis.call('HGET', KEYS[1], 'latest') or '0')
if n > 0 and redis.call('HGET', KEYS[1], 'c:' .. n) == ARGV[1] then return {n, 0} end
n = n + 1
redis.call('HSET', KEYS[1], 'latest', n, 'c:' .. n, ARGV[1], 'v:' .. n, ARGV[2])
redis.call('SADD', KEYS[2], ARGV[3])
return {n, 1}
"""

# KEYS[1] names set.  Returns name, version, stored JSON for the latest version of each.
LIST_LUA = """
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

INGEST_SHA = hashlib.sha1(INGEST_LUA.encode()).hexdigest()  # noqa: S324 - Redis script id


def tally_tag(spec: MetricSpec, epoch: int, shard: int) -> str:
    return f"ldp:{{m:{spec.name}:{spec.version}:{epoch}:{shard}}}"


def index_key(name: str, version: int) -> str:
    return f"ldp:{{x:{name}:{version}}}:slots"


def implausible_key(name: str, version: int, epoch: int) -> str:
    return f"ldp:{{x:{name}:{version}}}:i:{epoch}"


def spec_key(name: str) -> str:
    return f"ldp:{{spec}}:m:{name}"


def mac_key(secret: bytes) -> bytes:
    """The secret as a BLAKE2b key (at most 64 bytes)."""
    return secret if len(secret) <= 64 else blake2b(secret).digest()



def as_text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def canonical_json(spec_json: dict[str, Any]) -> bytes:
    return orjson.dumps(spec_json, option=orjson.OPT_SORT_KEYS)

