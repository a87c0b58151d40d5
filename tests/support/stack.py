"""The whole system on loopback for end-to-end tests: Redis, collector, aggregator.

``start_stack`` empties the session redis-server, starts the collector (uvicorn,
a free 127.0.0.1 port) with the settings a test names, and stops every process
it started, by pid, when the ``with`` block ends.  A test registers its metrics,
records through a ``Fleet`` of SDK devices, then starts the aggregator over what
Redis holds and reads its estimates:

>>> settings = StackSettings(acceptance_hours=24 * 12, clock_days_back=10)
>>> with start_stack(redis_server, tmp_path, settings) as stack:    # doctest: +SKIP
...     (answer,) = stack.register(SPEC)            # the collector's resolved spec
...     with stack.fleet() as fleet:                # refreshed; closed at the end
...         fleet.device().record(SPEC["name"], "pro")
...         stack.clock.advance()                   # the next day's epoch
...         fleet.flush(30)
...     served = stack.with_aggregator()
...     served.get(f"/v1/estimates/{SPEC['name']}", start=stack.clock.first_day)

Each setting is an environment variable of one of the two services:

>>> sorted(settings.collector_env().items())
[('LDP_ACCEPTANCE_HOURS', '288')]
>>> StackSettings(shards=1).collector_env()
{'LDP_SHARDS': '1'}
>>> env = StackSettings(max_read_counters=1 << 20).aggregator_env("redis://127.0.0.1:6399/0")
>>> env["LDP_REDIS_URL"], env["LDP_MAX_READ_COUNTERS"], env["LDP_ANALYST_KEYS"] == ANALYST_KEY
('redis://127.0.0.1:6399/0', '1048576', True)
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx

from client_sdk import Device, Fleet, UrllibTransport
from ldp_server.redis_server import RedisServer
from tests.support.servers import (
    ADMIN_KEY,
    ANALYST_KEY,
    INGEST_KEY,
    ServiceProcess,
    auth,
    start_collector,
    start_uvicorn,
)

__all__ = ["DAY", "Stack", "StackSettings", "SteppedClock", "start_stack"]

DAY = 86_400


class SteppedClock:
    """The devices' clock, moved by the test (a day at a time, say) to report in past epochs.

    >>> clock = SteppedClock(3 * DAY + 5.0)
    >>> clock(), clock.first_day
    (259205.0, 3)
    >>> clock.advance()
    >>> clock(), clock.first_day            # the first day stays where it started
    (345605.0, 3)
    """

    def __init__(self, start: float) -> None:
        self.start = start
        self.now = start

    def __call__(self) -> float:
        return self.now

    @property
    def first_day(self) -> int:
        """The day-epoch the clock started in."""
        return int(self.start // DAY)

    def advance(self, seconds: float = DAY) -> None:
        """Move the clock ``seconds`` forward."""
        self.now += seconds


@dataclass(frozen=True)
class StackSettings:
    """What one test changes from the default stack (``None``: the service's default).

    ``clock_days_back``: the devices report with a ``SteppedClock`` that starts that
    many days before now (``None``: the real clock).
    """

    acceptance_hours: int | None = None
    shards: int | None = None
    max_read_counters: int | None = None
    clock_days_back: int | None = None

    def collector_env(self) -> dict[str, str]:
        """The collector's settings beyond the test keys (``collector_env``)."""
        env = {}
        if self.acceptance_hours is not None:
            env["LDP_ACCEPTANCE_HOURS"] = str(self.acceptance_hours)
        if self.shards is not None:
            env["LDP_SHARDS"] = str(self.shards)
        return env

    def aggregator_env(self, redis_url: str) -> dict[str, str]:
        """A dev-mode aggregator over ``redis_url`` that takes the test analyst key."""
        env = {"LDP_ENV": "dev", "LDP_REDIS_URL": redis_url, "LDP_ANALYST_KEYS": ANALYST_KEY}
        if self.max_read_counters is not None:
            env["LDP_MAX_READ_COUNTERS"] = str(self.max_read_counters)
        return env


@dataclass(frozen=True)
class Stack:
    """The running stack: the services' URLs come from ``collector`` and ``aggregator``.

    ``stepped`` is the devices' clock when the settings asked for one (``clock``).  ``services``
    stops, by pid, what the stack started when ``start_stack``'s block ends.
    """

    redis: RedisServer
    collector: ServiceProcess
    settings: StackSettings
    log_dir: Path
    services: ExitStack = field(repr=False, compare=False)
    stepped: SteppedClock | None = None
    aggregator: ServiceProcess | None = None

    def register(self, *specs: Mapping[str, Any]) -> list[dict[str, Any]]:
        """POST each spec to the collector (admin key); the answers, each a 200 or 201."""
        answers = []
        for spec in specs:
            answer = httpx.post(
                f"{self.collector.url}/v1/metrics",
                json=dict(spec),
                headers=auth(ADMIN_KEY),
                timeout=10,
            )
            assert answer.status_code in (200, 201), answer.text
            answers.append(answer.json())
        return answers

    @contextmanager
    def fleet(self) -> Iterator[Fleet]:
        """A foreground ``Fleet`` on the ingest key (no proxies, the stack's clock), its
        metrics refreshed from the collector; closed without waiting when the block ends."""
        fleet = Fleet(
            self.collector.url,
            api_key=INGEST_KEY,
            background=False,
            transport=UrllibTransport(use_env_proxies=False),
            clock=self.stepped if self.stepped is not None else time.time,
        )
        try:
            assert fleet.refresh_metrics(5)
            yield fleet
        finally:
            fleet.close(0)

    def with_aggregator(self) -> Stack:
        """This stack with the aggregator started over its Redis (stopped with the stack)."""
        env = self.settings.aggregator_env(self.redis.url)
        service = start_uvicorn("aggregator.app:create_app", env, log_dir=self.log_dir / "agg")
        self.services.callback(service.stop)
        return replace(self, aggregator=service)

    def record_daily(self, name: str, holdings: Sequence[tuple[Device, Any]], days: int) -> None:
        """Each device records its value of metric ``name`` once a day for ``days`` days,
        the clock a day on after each; every record must be accepted."""
        for _ in range(days):
            for device, value in holdings:
                result = device.record(name, value)
                assert result.ok, result
            self.clock.advance()

    @property
    def clock(self) -> SteppedClock:
        """The devices' clock (with ``StackSettings.clock_days_back``)."""
        if self.stepped is None:
            raise RuntimeError(
                "the stack's devices use the real clock: "
                "set StackSettings(clock_days_back=...) for a stepped one"
            )
        return self.stepped

    @property
    def aggregator_url(self) -> str:
        """The aggregator's base URL (after ``with_aggregator``)."""
        if self.aggregator is None:
            raise RuntimeError("the aggregator is not started: call Stack.with_aggregator()")
        return self.aggregator.url

    def get(self, path: str, *, timeout: float = 60.0, **params: Any) -> dict[str, Any]:
        """GET ``path`` from the aggregator on the analyst key; the JSON of its 200."""
        answer = httpx.get(
            self.aggregator_url + path, params=params, headers=auth(ANALYST_KEY), timeout=timeout
        )
        assert answer.status_code == 200, answer.text
        body: dict[str, Any] = answer.json()
        return body


@contextmanager
def start_stack(
    redis_server: RedisServer, log_dir: Path, settings: StackSettings
) -> Iterator[Stack]:
    """The collector over the emptied ``redis_server`` (FLUSHALL), with ``settings``; every
    service the stack starts is stopped by pid when the block ends."""
    import redis

    with redis.Redis(port=redis_server.port) as client:
        client.flushall()
    clock = None
    if settings.clock_days_back is not None:
        clock = SteppedClock(time.time() - settings.clock_days_back * DAY)
    with ExitStack() as services:
        collector = start_collector(
            redis_server.url, log_dir=log_dir / "collector", extra_env=settings.collector_env()
        )
        services.callback(collector.stop)
        yield Stack(redis_server, collector, settings, log_dir, services, clock)
