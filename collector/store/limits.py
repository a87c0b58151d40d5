"""Per-client rate limits kept in Redis: atomic across workers and instances.

A client is the address the collector sees, never stored as such: its bucket
is keyed by ``blake2b(address, key=digest secret, digest_size=8)``, in a hash
that expires once the bucket would be full again.  A Lua script refills and
takes from Redis's own clock (``TIME``), so every worker and instance shares
one bucket per client, and a client that floods (even with invalid requests)
empties its own bucket only.

    ldp:{rl:<16 hex>}   HASH  t -> tokens left, at -> ms of the last refill; PEXPIRE

The takes of concurrent requests go out together (``GroupCommit``, as the
reports of ``Store.ingest_grouped`` do): the takes that reach a worker in one
event-loop turn, or while its take call is in flight, are ONE script call on a
single node (one per distinct client on a Redis Cluster, whose buckets live in
slots of their own).  The script applies them in arrival order, each as the
one-take script would have at that instant: a request is let through only if
its own token was there, and a refused take takes nothing.  The take stays
the first thing a request does (before the key check, the body and the RSA
token check): folding it into the ingest script would let a flood of requests
with bad tokens force RSA checks that no bucket limits.

A take whose call fails raises in the request (503 ``store_unavailable``):
the limiter fails closed, never waves a request through.  A bucket Redis
cannot read (not a hash) fails its own client's takes only, not the group's.

>>> client_key(b"k" * 32, "192.0.2.7").startswith("ldp:{rl:")
True
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from typing import Any

import redis.exceptions

from collector.store.base import StoreBase, settle
from collector.store.group import GroupCommit

__all__ = ["RATE_LUA", "ClientLimits", "client_key"]

# KEYS[j] distinct client buckets; ARGV[1] tokens per second, ARGV[2] burst,
# ARGV[2 + j] how many takes bucket j gets (in arrival order).  Returns one
# number per take, bucket by bucket: the milliseconds to wait before a token is
# there (0: taken), or -1 if the bucket could not be read (a key of another type).
RATE_LUA = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local rate, burst = tonumber(ARGV[1]), tonumber(ARGV[2])
local ttl = math.ceil(burst * 1000 / rate) + 1000
local out = {}
for j = 1, #KEYS do
  local n = tonumber(ARGV[2 + j])
  local b = redis.pcall('HMGET', KEYS[j], 't', 'at')
  if b['err'] then
    for i = 1, n do out[#out + 1] = -1 end
  else
    local tokens = tonumber(b[1]) or burst
    local at = tonumber(b[2]) or now
    tokens = math.min(burst, tokens + (now - at) * rate / 1000)
    for i = 1, n do
      if tokens >= 1 then
        tokens = tokens - 1
        out[#out + 1] = 0
      else
        out[#out + 1] = math.ceil((1 - tokens) * 1000 / rate)
      end
    end
    redis.call('HSET', KEYS[j], 't', string.format('%.6f', tokens), 'at', now)
    redis.call('PEXPIRE', KEYS[j], ttl)
  end
end
return out
"""

#: What a take's call answers when its bucket could not be read.
_UNREADABLE = -1


def client_key(secret: bytes, address: str) -> str:
    """The bucket key of a client address (a keyed digest: the address is not kept)."""
    digest = hashlib.blake2b(address.encode(), key=secret, digest_size=8, person=b"ldp-client")
    return f"ldp:{{rl:{digest.hexdigest()}}}"


class ClientLimits(StoreBase):
    """The rate-limit half of the Store (one bucket per client address)."""

    _rate_script: Any = None
    _takes: dict[tuple[float, int], GroupCommit[str, int]] | None = None

    async def take(self, address: str, rate: float, burst: int) -> float:
        """0.0 if this client may go ahead, else the seconds to wait (a whole number).

        Concurrent takes go out together (one script call on a single node);
        raises the Redis error of the call, or ``redis.exceptions.ResponseError``
        if this client's bucket cannot be read."""
        if rate <= 0:
            return 0.0
        key = client_key(await self._get_secret(), address)
        group = self._take_group(rate, burst)
        (wait_ms,) = await group.submit([key])
        if wait_ms == _UNREADABLE:
            raise redis.exceptions.ResponseError(f"the rate-limit bucket {key} is not a hash")
        return 0.0 if wait_ms <= 0 else float(math.ceil(wait_ms / 1000))

    async def take_many(self, address: str, rate: float, burst: int, count: int
                        ) -> tuple[int, float]:
        """Take up to ``count`` tokens of a client's bucket in one call: (taken, the
        seconds to wait for the next one, 0.0 if all were taken).  What a request
        that costs ``count`` units of work (signatures) is charged."""
        if rate <= 0 or count <= 0:
            return count, 0.0
        key = client_key(await self._get_secret(), address)
        group = self._take_group(rate, burst)
        waits = await group.submit([key] * count)
        if _UNREADABLE in waits:
            raise redis.exceptions.ResponseError(f"the rate-limit bucket {key} is not a hash")
        taken = sum(1 for w in waits if w <= 0)
        wait = max(waits)
        return taken, 0.0 if wait <= 0 else float(math.ceil(wait / 1000))

    def _take_group(self, rate: float, burst: int) -> GroupCommit[str, int]:
        if self._takes is None:
            self._takes = {}
        group = self._takes.get((rate, burst))
        if group is None:
            group = self._takes[(rate, burst)] = GroupCommit(
                lambda keys: self._take_all(keys, rate, burst))
        return group

    async def _take_all(self, keys: Sequence[str], rate: float, burst: int) -> list[int]:
        """One take per key, in order (a key may come more than once): the waits in ms."""
        if self._rate_script is None:
            self._rate_script = self.client.register_script(RATE_LUA)
        script = self._rate_script
        takes: dict[str, list[int]] = {}  # bucket -> positions of its takes, in order
        for position, key in enumerate(keys):
            takes.setdefault(key, []).append(position)
        waits = [0] * len(keys)
        if self.is_cluster:  # each bucket in its own slot: one call per bucket, concurrently
            replies = await settle(
                self._gated(script(keys=[key], args=[rate, burst, len(positions)]))
                for key, positions in takes.items())
            flat = [wait for reply in replies for wait in reply]
        else:
            flat = list(await script(keys=list(takes),
                                     args=[rate, burst, *map(len, takes.values())]))
        at = 0
        for positions in takes.values():
            for position in positions:
                waits[position] = int(flat[at])
                at += 1
        return waits
