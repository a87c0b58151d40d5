"""A live aggregator over a real Redis with tallies placed relative to *now*.

Shared by the analyst tests of the API, the Python client and the CLI: a
daily categorical metric with reports today, 3 days ago and 10 days ago, and
an hourly boolean with reports this hour-2 and 30 hours ago, so that
``since=7d`` / ``since=1d`` select known epochs.  Fixed seeds.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import redis

from ldp_core.simulate import tallies
from ldp_server.redis_server import RedisServer
from tests.support.servers import ANALYST_KEY, start_uvicorn
from tests.support.tallies import register, write_tallies

__all__ = ["PLANS", "world"]

PLANS = ["free", "pro", "team", "enterprise"]
SHARES = np.array([0.55, 0.25, 0.15, 0.05])


@contextmanager
def world(redis_server: RedisServer, log_dir: Path) -> Iterator[dict[str, Any]]:
    redis.Redis.from_url(redis_server.url).flushall()
    url = redis_server.url
    today = int(time.time() // 86400)
    hour = int(time.time() // 3600)
    plan = register(url, {"name": "plan", "kind": "categorical", "domain": PLANS,
                          "epsilon": 2.0, "mechanism": "grr", "min_reports": 200})
    days = {}
    for k, epoch in enumerate((today - 10, today - 3, today)):
        values = np.repeat(np.arange(len(PLANS)), np.round(SHARES * 4000).astype(int))
        t, n = tallies(plan.build(), values, seed=300 + k)
        days[epoch] = (t.tolist(), n)
    write_tallies(url, plan, days)
    beta = register(url, {"name": "beta_on", "kind": "boolean", "epsilon": 1.0,
                          "epoch": "hour", "min_reports": 200})
    hours = {}
    for k, epoch in enumerate((hour - 30, hour - 2)):
        t, n = tallies(beta.build(), [1] * 1000 + [0] * 2000, seed=400 + k)
        hours[epoch] = (t.tolist(), n)
    write_tallies(url, beta, hours)
    env = {"LDP_ENV": "dev", "LDP_REDIS_URL": url, "LDP_ANALYST_KEYS": ANALYST_KEY}
    service = start_uvicorn("aggregator.app:create_app", env, log_dir=log_dir)
    try:
        yield {"url": service.url, "today": today, "hour": hour, "days": days, "hours": hours}
    finally:
        service.stop()
