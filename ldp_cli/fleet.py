"""The demo's simulated fleet: true values drawn with a seed, reported through the SDK.

Four demo metrics: a boolean (did the app crash today), a categorical with
20 values on a Zipf(1.1) law (the browser), a numeric one (minutes in the
app, in [0, 120]) that serves its mean, distribution and quantiles, and a
string nobody listed (the search term: Zipf(1.1) over SEARCH_TERMS then 300
random words, typed in any case; discovered, not listed).  Each logical device
is a ``client_sdk.Fleet`` device with its own secret and ledger, so it reports
each metric once per epoch like a real phone; every report goes through the
real SDK and the collector's HTTP API.  The true values stay in this process:
they are what the estimates are compared with, and they are never sent.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from client_sdk import Counters, Fleet

__all__ = ["BROWSERS", "FleetRun", "Truth", "demo_specs", "draw_truth", "run_fleet"]

BROWSERS = (
    "chrome",
    "safari",
    "edge",
    "firefox",
    "samsung",
    "opera",
    "brave",
    "vivaldi",
    "yandex",
    "uc",
    "duckduckgo",
    "arc",
    "whale",
    "qq",
    "silk",
    "kiwi",
    "tor",
    "palemoon",
    "waterfox",
    "other",
)
ZIPF_S = 1.1
#: The most common search terms, in order; the metric's spec does not list them.
SEARCH_TERMS = ("weather", "news", "maps", "mail", "music", "games", "recipes", "soccer",
                "flights", "movies", "jobs", "shoes")
#: Random words of the long tail of searches (each rarer than the last listed term).
TAIL_WORDS = 300


def demo_specs(min_reports: int) -> list[dict[str, Any]]:
    """The three demo metric specs (POST /v1/metrics bodies)."""
    return [
        {
            "name": "demo.crashed",
            "kind": "boolean",
            "epsilon": 1.0,
            "mechanism": "auto",
            "epoch": "day",
            "unit": "device",
            "min_reports": min_reports,
        },
        {
            "name": "demo.browser",
            "kind": "categorical",
            "domain": list(BROWSERS),
            "epsilon": 2.0,
            "mechanism": "auto",
            "epoch": "day",
            "unit": "device",
            "min_reports": min_reports,
        },
        {
            "name": "demo.session_minutes",
            "kind": "numeric",
            "lo": 0.0,
            "hi": 120.0,
            "statistics": ["mean", "distribution", "quantiles"],
            "epsilon": 2.0,
            "mechanism": "auto",
            "epoch": "day",
            "unit": "device",
            "min_reports": min_reports,
        },
        {
            "name": "demo.search",
            "kind": "string",
            "max_length": 8,
            "alphabet": "a-z",
            "casefold": True,
            "epsilon": 4.0,
            "mechanism": "auto",
            "epoch": "day",
            "unit": "device",
            "min_reports": min_reports,
        },
    ]


@dataclass(frozen=True)
class Truth:
    """Every device's true values, and what the estimates should find."""

    crashed: tuple[int, ...]
    browser: tuple[str, ...]
    minutes: tuple[float, ...]
    search: tuple[str, ...] = ()

    @property
    def devices(self) -> int:
        return len(self.crashed)

    def values_of(self, metric: str) -> tuple[float, ...] | None:
        """A numeric demo metric's true values (for its quantiles and buckets), else None."""
        return self.minutes if metric == "demo.session_minutes" else None

    def of(self, metric: str) -> float | dict[str, float]:
        """The true proportion, shares or mean of a demo metric."""
        if metric == "demo.crashed":
            return float(np.mean(self.crashed))
        if metric == "demo.session_minutes":
            return float(np.mean(self.minutes))
        if metric == "demo.search":
            shares: dict[str, float] = {}
            for term in self.search:
                shares[term.lower()] = shares.get(term.lower(), 0.0) + 1 / self.devices
            return shares
        counts = {b: 0 for b in BROWSERS}
        for b in self.browser:
            counts[b] += 1
        return {b: c / self.devices for b, c in counts.items()}


def draw_truth(devices: int, seed: int = 2026) -> Truth:
    """True values of ``devices`` devices (fixed seed)."""
    rng = np.random.default_rng(seed)
    ranks = np.arange(1, len(BROWSERS) + 1, dtype=np.float64)
    zipf = ranks**-ZIPF_S
    browser = rng.choice(len(BROWSERS), size=devices, p=zipf / zipf.sum())
    minutes = np.clip(rng.gamma(2.0, 9.0, size=devices), 0.0, 120.0).round(1)
    crashed = (rng.random(devices) < 0.12).astype(int)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    tail = ["".join(rng.choice(letters, size=int(rng.integers(3, 9))))
            for _ in range(TAIL_WORDS)]
    words = [*SEARCH_TERMS, *tail]
    law = np.arange(1, len(words) + 1, dtype=np.float64) ** -ZIPF_S
    picked = rng.choice(len(words), size=devices, p=law / law.sum())
    capital = rng.random(devices) < 0.3  # typed "Weather": the device folds the case
    search = tuple(words[i].capitalize() if up else words[i]
                   for i, up in zip(picked, capital, strict=True))
    return Truth(
        crashed=tuple(int(x) for x in crashed),
        browser=tuple(BROWSERS[i] for i in browser),
        minutes=tuple(float(x) for x in minutes),
        search=search,
    )


@dataclass(frozen=True)
class FleetRun:
    """What the fleet did."""

    devices: int
    expected: int
    counters: Counters
    seconds: float
    complete: bool


def run_fleet(
    collector_url: str,
    ingest_key: str,
    specs: list[dict[str, Any]],
    truth: Truth,
    *,
    progress: Callable[[int, str], None] | None = None,
    timeout: float = 300.0,
    issuer_keys: Sequence[str] = (),
    token_concurrency: int = Fleet.TOKEN_CONCURRENCY,
) -> FleetRun:
    """Every device records its values through the SDK, then the fleet flushes.

    ``issuer_keys``: the token issuer key ids the fleet accepts (the demo pins the
    key of the collector it started); ``token_concurrency``: its token requests in
    flight at once (``client_sdk.Fleet``).
    """
    started = time.monotonic()
    deadline = started + timeout
    names = {s["name"] for s in specs}
    searching = "demo.search" in names and bool(truth.search)
    expected = (3 + searching) * truth.devices
    fleet = Fleet(collector_url, api_key=ingest_key, metrics=specs, background=True,
                  issuer_keys=issuer_keys, token_concurrency=token_concurrency)
    try:
        for i in range(truth.devices):
            device = fleet.device()
            device.record("demo.crashed", truth.crashed[i])
            device.record("demo.browser", truth.browser[i])
            device.record("demo.session_minutes", truth.minutes[i])
            if searching:
                device.record("demo.search", truth.search[i])
            if progress is not None and i % 500 == 0:
                progress(fleet.counters().delivered, "recording")
        complete = False
        while time.monotonic() < deadline:
            complete = fleet.flush(timeout=0.5)
            counters = fleet.counters()
            if progress is not None:
                progress(counters.delivered, "sending")
            if complete:
                break
        counters = fleet.counters()
    finally:
        fleet.close(2.0)
    return FleetRun(truth.devices, expected, counters, time.monotonic() - started, complete)
