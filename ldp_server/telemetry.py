"""Prometheus metrics every service shares: HTTP latency, the process, the exposition.

Counters live in prometheus-client.  With ``PROMETHEUS_MULTIPROC_DIR`` set (as
``ldp serve --workers N`` does) every worker writes its values to files in
that folder and a scrape of any worker sums them all, so with any number of
workers a counter never goes back: a scrape is the service's total, not one
worker's.  Several instances are several scrape targets (Prometheus sums
them with ``sum without (instance)``).  Without the folder (one process, as
under ``ldp up``) the values stay in memory.

Labels are only fixed reason codes, outcome names, HTTP methods, route
templates (``/v1/estimates/{name}``, never a raw path) and status codes:
nothing a client sent.  Process metrics: the standard ``process_*`` family in
one process; per worker (label ``pid``) under multiprocess mode.

``/metrics`` is guarded by ``scrape_allowed``: with ``LDP_METRICS_KEY`` set it
needs ``Authorization: Bearer <that key>``; without it, dev serves it openly
and prod does not serve it at all (404).

A service's own counters go on ``ServiceMetrics.registry`` (the collector's:
``collector.telemetry.Telemetry``).  ``sample_redis`` adds Redis's memory
against its cap (``INFO memory``), read at scrape time: the collector's
/metrics calls it, so ``ldp_redis_used_memory_bytes`` and
``ldp_redis_maxmemory_bytes`` come from the collector (NaN when Redis did not
answer; a maxmemory of 0 means no cap).

>>> m = ServiceMetrics("demo")
>>> m.observe_http("GET", "/healthz", 200, 0.002)
>>> for line in m.render().splitlines():
...     if "duration_seconds_count" in line:
...         print(*line.split("{")[1].split(","), sep=" | ")
method="GET" | route="/healthz" | service="demo" | status="200"} 1
"""

from __future__ import annotations

import atexit
import contextlib
import hmac
import logging
import math
import os
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import prometheus_client
import redis.exceptions
from fastapi.telemetry import TelemetryConfig
from prometheus_client import CollectorRegistry, Gauge, Histogram, values
from prometheus_client.core import Metric
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead

from ldp_server.keys import bearer_key
from ldp_server.processes import pid_alive, uvicorn_workers

__all__ = [
    "CONTENT_TYPE",
    "HTTP_BUCKETS",
    "MULTIPROC_ENV",
    "TELEMETRY_OFF",
    "HttpMetrics",
    "ServiceMetrics",
    "redis_memory",
    "render",
    "scrape_allowed",
]

#: Upper bounds (seconds) of the HTTP request latency histogram.
HTTP_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

#: ``FastAPI(telemetry=...)`` of both services: no tracing, metrics or logs through
#: FastAPI's native OpenTelemetry.  We export nothing through it; left on, it asks
#: three global providers on every request, and an environment that configures
#: them (``FASTAPI_OTEL_AUTO_CONFIGURE``) would send spans with URLs, query
#: strings and client addresses to an exporter we never chose.
TELEMETRY_OFF: TelemetryConfig = {"tracing": False, "metrics": False, "logs": False}

prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]

ASGIApp = Callable[
    [MutableMapping[str, Any], Callable[[], Awaitable[Any]], Callable[[Any], Awaitable[None]]],
    Awaitable[None],
]


def _multiproc_dir() -> str | None:
    folder = os.environ.get(MULTIPROC_ENV)
    if folder and values.ValueClass is values.MutexValue:
        # The folder was named after prometheus_client was imported: switch now,
        # before any metric of ours exists.
        values.ValueClass = values.MultiProcessValue()  # type: ignore[no-untyped-call]
    return folder or None


def _number(raw: float) -> str:
    value = float(raw)
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(value)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(labels: Mapping[str, str]) -> str:
    if not labels:
        return ""
    inner = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(labels.items()))
    return "{" + inner + "}"


def render(families: Iterable[Metric]) -> str:
    """The Prometheus text format (0.0.4); whole numbers print without '.0'.

    >>> from prometheus_client import Counter
    >>> registry = CollectorRegistry()
    >>> Counter("demo_events", "Events.", registry=registry).inc(2)
    >>> print(render(registry.collect()), end="")
    # HELP demo_events_total Events.
    # TYPE demo_events_total counter
    demo_events_total 2
    """
    lines: list[str] = []
    for family in sorted(families, key=lambda f: f.name):
        name = family.name + ("_total" if family.type == "counter" else "")
        lines.append(f"# HELP {name} {family.documentation}")
        lines.append(f"# TYPE {name} {family.type}")
        for sample in family.samples:
            if sample.name.endswith("_created"):
                continue
            lines.append(f"{sample.name}{_labels(sample.labels)} {_number(sample.value)}")
    return "\n".join(lines) + "\n"


@dataclass
class _ProcessSample:
    """This process's CPU, memory and descriptors from /proc (Linux), at most once a second."""

    gauges: dict[str, Gauge]
    last: float = 0.0

    def update(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self.last < 1.0:
            return
        self.last = now
        try:
            stat = Path("/proc/self/stat").read_text().rpartition(")")[2].split()
            ticks = os.sysconf("SC_CLK_TCK")
            page = os.sysconf("SC_PAGE_SIZE")
            boot = next(
                float(line.split()[1])
                for line in Path("/proc/stat").read_text().splitlines()
                if line.startswith("btime")
            )
            self.gauges["cpu"].set((int(stat[11]) + int(stat[12])) / ticks)
            self.gauges["rss"].set(int(stat[21]) * page)
            self.gauges["start"].set(boot + int(stat[19]) / ticks)
            self.gauges["fds"].set(len(os.listdir("/proc/self/fd")))
        except (OSError, ValueError, IndexError, StopIteration):
            pass


def redis_memory(info: Mapping[str, Any]) -> tuple[float, float]:
    """(used_memory, maxmemory) of an ``INFO memory`` reply; of a cluster's reply
    (one section per node), those of the node nearest its cap.

    >>> redis_memory({"used_memory": 1048576, "maxmemory": 4194304})
    (1048576.0, 4194304.0)
    >>> redis_memory({"10.0.0.1:7000": {"used_memory": 10, "maxmemory": 100},
    ...               "10.0.0.2:7000": {"used_memory": 90, "maxmemory": 100}})
    (90.0, 100.0)
    """
    nodes = [n for n in info.values() if isinstance(n, Mapping)] or [info]
    pairs = [(float(n["used_memory"]), float(n["maxmemory"])) for n in nodes]
    return max(pairs, key=lambda p: (p[0] / p[1] if p[1] else 0.0, p[0]))


@dataclass
class ServiceMetrics:
    """The shared metrics of one service process; see the module docstring."""

    service: str
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)
    multiproc_dir: str | None = field(default_factory=_multiproc_dir)

    def __post_init__(self) -> None:
        r = self.registry
        self.http_seconds = Histogram(
            "ldp_http_request_duration_seconds",
            "HTTP requests by method, route template and status: time to the response's end.",
            ["service", "method", "route", "status"], buckets=HTTP_BUCKETS, registry=r,
        )
        self._http_children: dict[tuple[str, str, int], Histogram] = {}
        self.process: _ProcessSample | None = None
        if self.multiproc_dir:
            mode: Literal["liveall"] = "liveall"
            self.process = _ProcessSample({
                "cpu": Gauge("ldp_process_cpu_seconds", "CPU time of a worker (user+system).",
                             registry=r, multiprocess_mode=mode),
                "rss": Gauge("ldp_process_resident_memory_bytes", "Resident memory of a worker.",
                             registry=r, multiprocess_mode=mode),
                "start": Gauge("ldp_process_start_time_seconds",
                               "Start of a worker, unix seconds.", registry=r,
                               multiprocess_mode=mode),
                "fds": Gauge("ldp_process_open_fds", "Open file descriptors of a worker.",
                             registry=r, multiprocess_mode=mode),
            })
            Gauge("ldp_workers", "Live worker processes.", registry=r,
                  multiprocess_mode="livesum").set(1)
            atexit.register(mark_process_dead, os.getpid(), self.multiproc_dir)
        else:
            prometheus_client.ProcessCollector(registry=r)
            _warn_if_one_of_several_workers(self.service)
        self.redis_gauges: dict[str, Gauge] = {}

    async def sample_redis(self, client: Any) -> None:
        """Set the Redis memory gauges from ``INFO memory`` (NaN if Redis does not answer).

        ``client`` is a redis.asyncio ``Redis`` or ``RedisCluster``; the gauges
        exist from the first call on (a service that never calls it has none).
        """
        if not self.redis_gauges:
            mode: Literal["livemostrecent"] = "livemostrecent"
            self.redis_gauges = {
                "ldp_redis_used_memory_bytes": Gauge(
                    "ldp_redis_used_memory_bytes", "Redis used_memory (INFO memory) at the "
                    "last scrape; of a cluster, the node nearest its cap.",
                    registry=self.registry, multiprocess_mode=mode),
                "ldp_redis_maxmemory_bytes": Gauge(
                    "ldp_redis_maxmemory_bytes", "Redis maxmemory of that node (0: no cap; "
                    "a full Redis refuses writes under noeviction).",
                    registry=self.registry, multiprocess_mode=mode),
            }
        try:
            used, cap = redis_memory(await client.info("memory"))
        except (redis.exceptions.RedisError, OSError, KeyError, ValueError, TypeError):
            used = cap = math.nan
        self.redis_gauges["ldp_redis_used_memory_bytes"].set(used)
        self.redis_gauges["ldp_redis_maxmemory_bytes"].set(cap)

    def observe_http(self, method: str, route: str, status: int, seconds: float) -> None:
        key = (method, route, status)
        child = self._http_children.get(key)
        if child is None:  # ``labels`` costs more than the observation itself
            child = self.http_seconds.labels(self.service, method, route, str(status))
            self._http_children[key] = child
        child.observe(seconds)
        self.sample_process()

    def sample_process(self) -> None:
        """Refresh this worker's process gauges (at most once a second; multiprocess only)."""
        if self.process is not None:
            self.process.update()

    def render(self) -> str:
        """Every worker's values summed (multiprocess mode), else this process's."""
        if not self.multiproc_dir:
            return render(self.registry.collect())
        if self.process is not None:
            self.process.update(force=True)
        _forget_dead_workers(self.multiproc_dir)
        merged = CollectorRegistry()
        MultiProcessCollector(merged, self.multiproc_dir)  # type: ignore[no-untyped-call]
        return render(merged.collect())


def _forget_dead_workers(folder: str) -> None:
    """Drop the live-gauge files of workers that died without running atexit (SIGKILL,
    out of memory), so ``ldp_workers`` and the per-pid series count live workers only;
    their counters and histograms stay (a counter never goes back)."""
    for path in Path(folder).glob("gauge_live*_*.db"):
        pid = path.stem.rpartition("_")[2]
        if pid.isdigit() and not pid_alive(int(pid)):
            with contextlib.suppress(OSError):  # another worker removed them first
                mark_process_dead(int(pid), folder)  # type: ignore[no-untyped-call]


_warned = False


def _warn_if_one_of_several_workers(service: str) -> None:
    """Log one WARNING per process when uvicorn runs several workers without
    ``PROMETHEUS_MULTIPROC_DIR``: each /metrics then counts one worker only."""
    global _warned
    workers = uvicorn_workers()
    if _warned or workers <= 1:
        return
    _warned = True
    logging.getLogger("uvicorn.error").warning(
        "this worker's /metrics counts its own requests only (pid %d, one of %d uvicorn"
        " workers, %s unset): run `ldp serve %s --workers %d`, or set %s to an empty"
        " folder, so that every scrape sums all workers", os.getpid(), workers,
        MULTIPROC_ENV, service, workers, MULTIPROC_ENV)


#: Method labels kept as sent; any other method (h11 passes any token) counts as
#: ``other``, so a client cannot grow the label set without bound.
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


class HttpMetrics:
    """ASGI middleware: one latency observation per HTTP request, by route template.

    The route is FastAPI's template (``scope["route"].path``) once routing ran;
    a request no route matched counts as ``unmatched``.
    """

    def __init__(self, app: ASGIApp, telemetry: ServiceMetrics) -> None:
        self.app = app
        self.telemetry = telemetry

    async def __call__(
        self,
        scope: MutableMapping[str, Any],
        receive: Callable[[], Awaitable[Any]],
        send: Callable[[Any], Awaitable[None]],
    ) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def sending(message: Any) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            route = getattr(scope.get("route"), "path", None) or "unmatched"
            method = scope.get("method", "")
            self.telemetry.observe_http(method if method in _METHODS else "other", str(route),
                                        status, time.perf_counter() - start)


def scrape_allowed(metrics_key: str | None, env: str, authorization: str | None) -> int:
    """200 if a scrape may be served, 401 without the right key, 404 when off.

    >>> scrape_allowed(None, "dev", None), scrape_allowed(None, "prod", None)
    (200, 404)
    >>> key = "m" * 24
    >>> scrape_allowed(key, "prod", "Bearer " + key), scrape_allowed(key, "dev", None)
    (200, 401)
    """
    if not metrics_key:
        return 200 if env != "prod" else 404
    presented = bearer_key(authorization) or ""
    return 200 if hmac.compare_digest(presented.encode(), metrics_key.encode()) else 401
