"""Per-client rate limits kept in Redis: atomic across workers and instances.

A client is the address the collector sees, never stored as such: its bucket
is keyed by ``blake2b(address, key=digest secret, digest_size=8)``, in a hash
that expires once the bucket would be full again.  One Lua call per request
refills and takes a token from Redis's own clock (``TIME``), so every worker
and instance shares one bucket per client, and a client that floods (even with
invalid requests) empties its own bucket only.

    ldp:{rl:<16 hex>}   HASH  t -> tokens left, at -> ms of the last refill; PEXPIRE

>>> client_key(b"k" * 32, "192.0.2.7").startswith("ldp:{rl:")
True
"""

from __future__ import annotations

import hashlib
import math
from typing import Any

from collector.store.base import StoreBase

__all__ = ["RATE_LUA", "ClientLimits", "client_key"]

# KEYS[1] the client's bucket; ARGV[1] tokens per second, ARGV[2] burst.
# Returns the milliseconds to wait before a token is there (0: taken).
RATE_LUA = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local rate, burst = tonumber(ARGV[1]), tonumber(ARGV[2])
local b = redis.call('HMGET', KEYS[1], 't', 'at')
local tokens = tonumber(b[1]) or burst
local at = tonumber(b[2]) or now
tokens = math.min(burst, tokens + (now - at) * rate / 1000)
local wait = 0
if tokens >= 1 then tokens = tokens - 1 else wait = math.ceil((1 - tokens) * 1000 / rate) end
redis.call('HSET', KEYS[1], 't', string.format('%.6f', tokens), 'at', now)
redis.call('PEXPIRE', KEYS[1], math.ceil(burst * 1000 / rate) + 1000)
return wait
"""


def client_key(secret: bytes, address: str) -> str:
    """The bucket key of a client address (a keyed digest: the address is not kept)."""
    digest = hashlib.blake2b(address.encode(), key=secret, digest_size=8, person=b"ldp-client")
    return f"ldp:{{rl:{digest.hexdigest()}}}"


class ClientLimits(StoreBase):
    """The rate-limit half of the Store (one bucket per client address)."""

    _rate_script: Any = None

    async def take(self, address: str, rate: float, burst: int) -> float:
        """0.0 if this client may go ahead, else the seconds to wait."""
        if rate <= 0:
            return 0.0
        if self._rate_script is None:
            self._rate_script = self.client.register_script(RATE_LUA)
        key = client_key(await self._get_secret(), address)
        wait_ms = int(await self._rate_script(keys=[key], args=[rate, burst]))
        return 0.0 if wait_ms <= 0 else math.ceil(wait_ms / 1000)
