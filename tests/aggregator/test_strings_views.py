"""A string metric's estimate JSON, dashboard section and CLI table, from real tallies."""

from __future__ import annotations

import numpy as np

from aggregator.page import metrics_page
from aggregator.views import EstimateOptions, estimate_json, metric_facts
from ldp_cli.table import format_estimate
from ldp_core.mechanisms.prefix import PrefixOLH
from ldp_core.metric import MetricSpec

SPEC = MetricSpec.from_json({"name": "search", "kind": "string", "epsilon": 4.0,
                             "max_length": 6, "alphabet": "a-z", "min_reports": 1})


def body_for(counts: dict[str, int]) -> dict[str, object]:
    m = SPEC.build()
    assert isinstance(m, PrefixOLH)
    codes = np.array([m.check_value(s) for s in counts], dtype=np.int64)
    tallies = m.simulate_counts(codes, np.array(list(counts.values())), np.random.default_rng(0))
    n = int(sum(counts.values()))
    body = {**metric_facts(SPEC), "window": {"epochs": 1, "first_epoch": None},
            **estimate_json(SPEC, tuple(int(t) for t in tallies), n, EstimateOptions())}
    return body


def test_the_discovered_list_reaches_the_json_the_page_and_the_table() -> None:
    """40,000 reports: "hello" 50% is over 40 null standard deviations at every level
    (found but with probability < 1e-300); the tail is 2,000 strings of 10 reports."""
    rng = np.random.default_rng(1)
    tail = {"".join(rng.choice(list("abcdefghijklmnopqrstuvwxyz"), size=5)): 10
            for _ in range(2000)}
    body = body_for({"hello": 20_000, **tail})
    est = body["estimate"]
    assert isinstance(est, dict)
    top = est["values"][0]
    assert (top["category"], top["confident"]) == ("hello", True)
    assert top["ci_low"] <= 0.5 <= top["ci_high"]
    assert 0 < est["detection_threshold"] < 0.05
    assert body["normalisation"] == "NFC, casefold" and body["alphabet"] == "a-z"
    page = metrics_page([body])
    assert "hello" in page and "not seen: a string below" in page
    text = format_estimate(body)
    assert "hello" in text and "not seen: a string below" in text


def test_nothing_discovered_still_renders() -> None:
    body = body_for({"abc": 1, "abd": 1, "xyz": 1})
    page = metrics_page([body])
    assert "not seen" in page
    assert "not seen" in format_estimate(body)
