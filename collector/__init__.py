"""collector: the FastAPI service that validates randomised reports and keeps only
their tallies in Redis, each report counted at most once.

>>> from collector.app import create_app          # uvicorn --factory collector.app:create_app
>>> from collector.store import Store             # the Redis schema; the aggregator reads here

Laid out like the aggregator: ``app`` (the ``create_app`` factory and its
error handlers), ``routers`` (one per resource: health/ops, metrics,
reports), ``deps`` (typed dependencies: settings, store, runtime, role
checks), ``store`` (the package that alone knows the Redis key schema:
schema, registry, ingest, read side), ``ingest`` (body limits, batch
validation), ``plausibility`` (implausible unary reports), ``settings``
(environment), ``openapi``, ``telemetry`` (Prometheus text), ``logs`` (JSON
logs).  Problems, the key ring, the Redis client, embedded Redis and process
helpers are the server kit's (``ldp_server``).
"""

__all__: list[str] = []
