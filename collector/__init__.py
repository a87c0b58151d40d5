"""collector: the FastAPI service that validates randomised reports and keeps only
their tallies in Redis, each report counted at most once.

>>> from collector.app import create_app          # uvicorn --factory collector.app:create_app
>>> from collector.store import Store             # the Redis schema; the aggregator reads here

Modules: ``app`` (routes, endpoints and codes), ``store`` (Redis key schema,
Lua ingest, read side), ``ingest`` (body limits, batch validation),
``settings`` (environment), ``auth`` (keys, rate limit), ``problems``
(problem+json), ``telemetry`` (Prometheus text), ``logs`` (JSON logs),
``redis_server`` (a real redis-server process).
"""

__all__: list[str] = []
