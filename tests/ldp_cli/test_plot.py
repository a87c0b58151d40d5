"""``ldp plot`` of a distribution metric: buckets with their band, the shape, the quantiles."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from aggregator.distribution import distribution_json
from ldp_cli.plot import figure_of, plot_estimate
from ldp_core.mechanisms.hierarchical import HierarchicalHistogram


def _body(suppressed: bool = False) -> dict[str, Any]:
    m = HierarchicalHistogram(0.5, 0.0, 500.0)
    values = np.random.default_rng(0).beta(2, 5, 5000) * 500
    t = m.simulate_tallies(values, 1, np.random.default_rng(1))[0]
    shape = distribution_json(["distribution", "quantiles"], m, list(t), 5000, 0.95, buckets=8)
    return {
        "metric": "latency", "version": 1, "kind": "numeric", "mechanism": m.name,
        "epsilon": 0.5, "unit": "per device, per metric, per day", "n": 5000,
        "epoch_length": "day", "confidence": 0.95, "suppressed": suppressed,
        "reason": "too few" if suppressed else None,
        "estimate": None if suppressed else {
            "value": 140.0, "stderr": 9.0, "ci_low": 122.0, "ci_high": 158.0, **shape},
        "series": [{"suppressed": False, "start_time": 86400 * 3, "estimate": {
            "value": 140.0, "ci_low": 122.0, "ci_high": 158.0}}],
    }


def test_a_distribution_gets_its_panel_with_band_shape_and_quantiles(tmp_path: Path) -> None:
    body = _body()
    fig = figure_of(body)
    assert len(fig.axes) == 3
    panel = fig.axes[2]
    buckets = body["estimate"]["distribution"]["buckets"]
    # The band: one filled polygon over the 8 buckets' intervals.
    assert len(panel.collections) >= 1
    lines = {line.get_label(): line for line in panel.get_lines()}
    shape = lines["served shape"].get_ydata()
    assert list(shape[:-1]) == [b["smoothed"] for b in buckets]
    assert list(lines["unbiased share"].get_ydata()[:-1]) == [b["value"] for b in buckets]
    # One vertical line per quantile, at its value, each over its interval's span.
    marks = sorted(line.get_xdata()[0] for line in panel.get_lines()
                   if len(set(line.get_xdata())) == 1 and line.get_label().startswith("_"))
    assert marks == sorted(q["value"] for q in body["estimate"]["quantiles"])
    assert [t.get_text() for t in panel.texts] == ["p50", "p90", "p99"]
    out = tmp_path / "latency.png"
    plot_estimate(body, out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_suppressed_distribution_draws_no_panel() -> None:
    assert len(figure_of(_body(suppressed=True)).axes) == 2
