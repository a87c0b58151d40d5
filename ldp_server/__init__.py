"""ldp_server: the server kit shared by the collector and the aggregator.

>>> from ldp_server.problems import Problem          # problem+json, one vocabulary
>>> from ldp_server.settings import ServerSettings   # LDP_* settings, no secret echoed
>>> from ldp_server.keys import KeyRing              # keys by role, as digests
>>> from ldp_server.redis_server import RedisServer  # a real redis-server process
>>> from ldp_server.service import UvicornService    # a uvicorn subprocess on loopback

Modules: ``problems`` (RFC 9457 errors, the code table), ``settings`` (the
settings base), ``keys`` (key ring, bearer keys, sessions, rate limit),
``redis_client`` (client factory, Redis-down handlers), ``redis_server``
(embedded Redis), ``processes`` (stop by pid, wait for HTTP), ``service``
(one uvicorn subprocess).  Imported by collector, aggregator and ldp_cli
(and tests, benchmarks); never by ldp_core or client_sdk.
"""

__all__: list[str] = []
