"""Pure parts of the aggregator: settings, the decision rule, windows, charts, auth, logs."""

from __future__ import annotations

import logging

import pytest
from pydantic import ValidationError

from aggregator.app import _RedactQuery
from aggregator.auth import analyst_ring
from aggregator.charts import Bar, Point, bar_chart, series_chart
from aggregator.decide import decide
from aggregator.settings import Settings
from aggregator.views import suppression_reason
from aggregator.window import select_epochs
from ldp_core.metric import MetricSpec

GOOD_KEY = "analyst-key-0123456789abcdefghij"


def test_prod_refuses_unsafe_settings() -> None:
    with pytest.raises(ValidationError, match="LDP_ANALYST_KEYS is empty"):
        Settings(env="prod", redis_url="redis://127.0.0.1:1/0")
    with pytest.raises(ValidationError, match="shorter than 24"):
        Settings(env="prod", redis_url="redis://127.0.0.1:1/0", analyst_keys="short")
    with pytest.raises(ValidationError, match="no LDP_REDIS_URL"):
        Settings(env="prod", analyst_keys=GOOD_KEY)
    with pytest.raises(ValidationError, match="not both"):
        Settings(redis_url="redis://x:1/0", redis_cluster_nodes="a:1")
    ok = Settings(env="prod", redis_url="redis://127.0.0.1:1/0", analyst_keys=f"{GOOD_KEY}, ")
    assert ok.keys() == (GOOD_KEY,) and ok.secure_cookies
    assert Settings(redis_cluster_nodes="10.0.0.1:7000,:7001").cluster_nodes() == [
        ("10.0.0.1", 7000),
        ("127.0.0.1", 7001),
    ]


def test_settings_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LDP_ANALYST_KEYS", f"{GOOD_KEY},second-key-0123456789abcdef")
    monkeypatch.setenv("LDP_ENV", "dev")
    assert len(Settings().keys()) == 2


def test_decision_rule() -> None:
    assert decide(0.10, 0.02, 0.95).verdict == "greater"
    assert decide(-0.10, 0.02, 0.95).verdict == "less"
    assert decide(0.03, 0.02, 0.95).verdict == "too_close_to_call"  # 1.5 se
    assert decide(0.03, 0.02, 0.80).verdict == "greater"  # 1.5 se > z(0.80) = 1.28
    d = decide(0.0, 0.01, 0.95)
    assert d.ci_low == pytest.approx(-0.0196, abs=1e-4) and d.verdict == "too_close_to_call"


def test_window_selection_and_suppression() -> None:
    assert select_epochs([3, 1, 2, 2, 9], None, None) == [1, 2, 3, 9]
    assert select_epochs([3, 1, 2, 9], 2, None) == [2, 3, 9]
    assert select_epochs([3, 1, 2, 9], None, 3) == [1, 2]
    spec = MetricSpec.from_json({"name": "x", "kind": "boolean", "epsilon": 1.0, "min_reports": 50})
    assert suppression_reason(spec, 0) == "no reports in the window"
    assert suppression_reason(spec, 49) is not None and suppression_reason(spec, 50) is None


def test_keyring() -> None:
    ring = analyst_ring((GOOD_KEY,))
    assert ring.check_bearer(f"Bearer {GOOD_KEY}") and ring.check_bearer(f"bearer  {GOOD_KEY}")
    assert not ring.check_bearer(GOOD_KEY) and not ring.check_bearer("Bearer ")
    assert not analyst_ring(()).check_key("")


def test_access_log_loses_query_and_address() -> None:
    record = logging.LogRecord(
        "uvicorn.access",
        logging.INFO,
        "",
        0,
        '%s - "%s %s HTTP/%s" %d',
        ("10.1.2.3:5555", "GET", f"/?key={GOOD_KEY}", "1.1", 303),
        None,
    )
    _RedactQuery().filter(record)
    text = record.getMessage()
    assert GOOD_KEY not in text and "10.1.2.3" not in text and "/?<redacted>" in text


def test_charts_escape_labels_and_count_elements() -> None:
    svg = bar_chart([Bar("<script>", 0.5, 0.4, 0.6), Bar("b", -0.02, -0.06, 0.02)])
    assert "<script>" not in svg and "&lt;script&gt;" in svg
    assert svg.count('class="bar"') == 2 and svg.count('class="ci"') == 2
    points = [
        Point(1, "d1", 0.3, 0.2, 0.4, ""),
        Point(2, "d2", None, None, None, "few"),
        Point(3, "d3", 0.35, 0.3, 0.4, ""),
        Point(4, "d4", 0.33, 0.3, 0.37, ""),
    ]
    series = series_chart(points, title="t")
    assert series.count('class="point"') == 3 and series.count('class="suppressed-epoch"') == 1
    assert series.count('class="band"') == 1 and series.count('class="ci"') == 1
