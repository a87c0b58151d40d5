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
    ldp:{m:<name>:<v>:<epoch>:<shard>}:d    HASH   the per-report state (spent tokens): field
                                                   = 2-byte bucket, value = the 6-byte
                                                   rests of the spent-token digests of that
                                                   bucket, concatenated; and "~" -> 65
                                                   filler bytes (keeps it a hash table)
                                                   until the slot holds 4,096 reports;
                                                   EXPIREAT the end of the epoch's
                                                   acceptance window + 1 hour
    ldp:{x:<name>:<v>}:i:<epoch>            SET    report-id digests (8 bytes) of the
                                                   reports refused as implausible_report
                                                   (collector.plausibility); its SCARD is
                                                   the poisoning flag of the metric-epoch
                                                   (``read_flags``); same EXPIREAT

What is never written: a true value (devices send only randomised reports), an
IP address, a user agent, a report id or a token in clear, a stable device id.
Digests are keyed MACs: BLAKE2b in its keyed mode (RFC 7693, the MAC that
BLAKE2 defines in place of HMAC; five times faster than HMAC-SHA256 here),
``blake2b(nonce, key=secret, digest_size=12, person=b"ldp-spent")`` of a
token's nonce and ``blake2b(report_id, key=secret, digest_size=8,
person=b"ldp-report-id")`` of refused report ids,
so a leaked Redis dump cannot be matched against tokens or ids seen elsewhere
without the secret.

Per-report state.  A report is counted once per token and metric: its token
(checked before the store, ``collector.tokens``) is valid for one epoch (of
one length) and a device attaches it to its reports of every metric of that
epoch, so the state of a slot (metric, version, epoch, shard) is the set of
nonces spent in that slot: the same nonce is accepted once in each metric's
slot (and once per version of a metric: the stated bound, docs/threat-model.md "Threat
model").  The
12-byte digest of a nonce is split: bytes 0-3 pick the shard (mod shards),
bytes 4-5 the bucket, bytes 6-11 are the rest stored in the bucket's value.
A retry of a delivered report carries the same token and is a ``duplicate``;
a second report with a spent token is a ``duplicate`` too (not counted; only
a broken or hostile client reuses a token, and telling the two apart would
cost the 8 bytes per report of a report-id digest).  Two different tokens of
one slot collide (a false duplicate: an honest report lost) only if their 64
bucket+rest bits agree: with n spent tokens in the slot, probability n / 2**64
per report, 5.4e-13 at n = 10**7 (goal <= 1e-9 holds up to n = 1.8e10).
The state lives as long as the epoch accepts reports (``acceptance_seconds``,
``LDP_ACCEPTANCE_HOURS``): a later report is refused as ``epoch_expired``
before it reaches Redis, so the state is never needed after it expires.

Writes.  One Lua script per (metric, version, epoch, shard) slot applies all
of a batch's reports for that slot atomically: one HMGET of the buckets of
its reports, then for each report in order a plain substring search of its
6-byte rest in the bucket (aligned to 6 bytes): found (stored, or earlier in
the batch) is ``duplicate``; else the rest is appended; one HSET writes the
changed buckets; the merged increments of the accepted reports are applied
with one HMGET and one HSET of the counters (exact below 2^53).  On one node
the same script adds its slot to the ``slots`` index, so counters are never visible without their
index entry, and all slots of a batch go in ONE call (``INGEST_BATCH_LUA``, the
same per-slot function in a loop; EVALSHA, loaded again on NOSCRIPT): a batch of
50 devices x 20 metrics touches 80 slots, and a script call costs Redis more
than a slot's few reports.  On a Redis Cluster the index is in
another slot: one SADD per index goes first, then one script call per slot,
each round as one pipeline per master (``StoreBase._per_master``), and
``ingest`` returns only once every call has settled.

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
    "INGEST_BATCH_LUA",
    "INGEST_BATCH_SHA",
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
    "spent_record",
    "tally_tag",
]

SPEC_NAMES = "ldp:{spec}:names"
SPEC_SECRET = "ldp:{spec}:secret"  # noqa: S105 - a key name, not a secret

# KEYS[1] tally hash, KEYS[2] per-report state hash, KEYS[3] (one node only) the
# slots index.  ARGV[1] EXPIREAT of the state hash; ARGV[2] R, the number of reports;
# ARGV[3] R records of 8 bytes: bucket (2) then rest (6) of the spent-token digest;
# ARGV[4] the counters of each report, "i,j;k;...;" (";" after each report), read
#         only to take back the counters of refused reports;
# ARGV[5] the merged increments of all R reports, "index:count,index:count,...";
# ARGV[6] EXPIREAT of the tally hash (the counters' retention);
# ARGV[7] with KEYS[3]: this slot's member of the index, "epoch:shard".
# Returns a string of R characters: "0" accepted, "1" duplicate (token spent).
_INGEST_SLOT = """
-- unpack() of more than ~8000 values fails ("too many results to unpack": Lua's
-- C stack), so a slot's HMGET and HSET go in chunks of 4000 arguments (even: an
-- HSET chunk holds whole field/value pairs).
local CHUNK = 4000
local FILLED = 4096
local function hmget(key, names)
  local out = {}
  for s = 1, #names, CHUNK do
    local part = redis.call('HMGET', key, unpack(names, s, math.min(s + CHUNK - 1, #names)))
    for i = 1, #part do out[s + i - 1] = part[i] end
  end
  return out
end
local function hset(key, flat)
  for s = 1, #flat, CHUNK do
    redis.call('HSET', key, unpack(flat, s, math.min(s + CHUNK - 1, #flat)))
  end
end
local function slot(tkey, dkey, a1, a2, a3, a4, a5, a6)
  local r = tonumber(a2)
  local records = a3
  local buckets = {}
  for i = 1, r do buckets[i] = string.sub(records, 8 * i - 7, 8 * i - 6) end
  local held = hmget(dkey, buckets)
  local now, changed, order = {}, {}, {}
  local out, refused = {}, {}
  local accepted = 0
  for i = 1, r do
    local b = buckets[i]
    local rest = string.sub(records, 8 * i - 5, 8 * i)
    local blob = now[b] or held[i] or ''
    local dup = false
    local at = string.find(blob, rest, 1, true)
    while at do
      if (at - 1) % 6 == 0 then dup = true break end
      at = string.find(blob, rest, at + 1, true)
    end
    if dup then
      out[i] = '1'
      refused[i] = true
    else
      out[i] = '0'
      accepted = accepted + 1
      now[b] = blob .. rest
      if not changed[b] then changed[b] = true order[#order + 1] = b end
    end
  end
  if accepted == 0 then return table.concat(out), 0 end
  local fields = {}
  -- EXPIREAT answers 0 for a key not there yet: a new state hash gets the field
  -- "~" (no bucket: those are 2 bytes) with a value over hash-max-listpack-value
  -- (64), so it is a hash table from its first report.  A listpack is scanned by
  -- every field look-up: the 251st to 1,500th reports of a slot cost 2-6x the
  -- Redis CPU under Redis's compiled-in hash-max-listpack-entries of 512.  The
  -- filler goes once the slot holds FILLED reports (below).
  local fresh = redis.call('EXPIREAT', dkey, a1) == 0
  if fresh then
    fields[1] = '~'
    fields[2] = string.rep('-', 65)
  end
  for _, b in ipairs(order) do
    fields[#fields + 1] = b
    fields[#fields + 1] = now[b]
  end
  hset(dkey, fields)
  if fresh then redis.call('EXPIREAT', dkey, a1) end
  -- The counters: one HMGET and one HSET (a call from Lua costs Redis more than
  -- the arithmetic), exact integers while a counter is below 2^53.
  local idx, inc, pos = {}, {}, {}
  for k, n in string.gmatch(a5, '(%d+):(%d+)') do
    idx[#idx + 1] = k
    inc[#idx] = tonumber(n)
    pos[k] = #idx
  end
  if accepted < r then
    local i = 1
    for counters in string.gmatch(a4, '([^;]*);') do
      if refused[i] then
        for k in string.gmatch(counters, '%d+') do inc[pos[k]] = inc[pos[k]] - 1 end
      end
      i = i + 1
      if i > r then break end
    end
  end
  idx[#idx + 1] = 'n'
  inc[#idx] = accepted
  local have = hmget(tkey, idx)
  -- FILLED reports fill ~4,000 buckets: a hash table even after a reload, under
  -- any hash-max-listpack-entries below that.  Without the filler a slot whose 65,536
  -- buckets are all taken keeps a table of 2^16 entries, not 2^17.
  local before = tonumber(have[#idx]) or 0
  if before < FILLED and before + accepted >= FILLED then redis.call('HDEL', dkey, '~') end
  local set = {}
  for j = 1, #idx do
    if inc[j] ~= 0 then
      set[#set + 1] = idx[j]
      set[#set + 1] = string.format('%d', (tonumber(have[j]) or 0) + inc[j])
    end
  end
  hset(tkey, set)
  redis.call('EXPIREAT', tkey, a6)
  return table.concat(out), accepted
end
"""
INGEST_LUA = _INGEST_SLOT + """
local out, accepted = slot(KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5],
                           ARGV[6])
if accepted > 0 and KEYS[3] then redis.call('SADD', KEYS[3], ARGV[7]) end
return out
"""

# One node: every slot of a batch in ONE call (a script may touch keys of several
# hash slots outside Redis Cluster).  ARGV[1] S, the number of slots; slot j (from 0)
# has KEYS[3j+1..3j+3] and ARGV[7j+2..7j+8], laid out as INGEST_LUA's.  Returns
# the S strings of INGEST_LUA, in order.
INGEST_BATCH_LUA = _INGEST_SLOT + """
local out, members = {}, {}
for j = 0, tonumber(ARGV[1]) - 1 do
  local k, a = 3 * j, 7 * j + 1
  local accepted
  out[j + 1], accepted = slot(KEYS[k + 1], KEYS[k + 2], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3],
                              ARGV[a + 4], ARGV[a + 5], ARGV[a + 6])
  if accepted > 0 then
    local x = KEYS[k + 3]
    if not members[x] then members[x] = {} end
    table.insert(members[x], ARGV[a + 7])
  end
end
for x, list in pairs(members) do redis.call('SADD', x, unpack(list)) end
return out
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
INGEST_BATCH_SHA = hashlib.sha1(INGEST_BATCH_LUA.encode()).hexdigest()  # noqa: S324


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



def spent_record(secret: bytes, nonce_hex: str, shards: int) -> tuple[int, bytes, bytes]:
    """(shard, bucket, rest) of a spent token in the per-report state (see above).

    >>> shard, bucket, rest = spent_record(b"k" * 32, "00" * 32, 4)
    >>> 0 <= shard < 4, len(bucket), len(rest)
    (True, 2, 6)
    """
    digest = blake2b(nonce_hex.encode(), key=mac_key(secret), digest_size=12,
                     person=b"ldp-spent").digest()
    return int.from_bytes(digest[:4], "big") % shards, digest[4:6], digest[6:]


def as_text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def canonical_json(spec_json: dict[str, Any]) -> bytes:
    return orjson.dumps(spec_json, option=orjson.OPT_SORT_KEYS)

