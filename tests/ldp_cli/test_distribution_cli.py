"""``ldp metric create --statistics`` and ``ldp estimate --quantiles``: flags to the API."""

from __future__ import annotations

from ldp_cli.main import build_parser
from ldp_cli.query import estimate_params, spec_from_args
from ldp_core.metric import MetricSpec


def test_statistics_flag_makes_a_distribution_metric() -> None:
    args = build_parser().parse_args([
        "metric", "create", "lat", "--kind", "numeric", "--lo", "0", "--hi", "500",
        "--epsilon", "1", "--statistics", "mean, quantiles",
    ])
    body = spec_from_args(args)
    assert body["statistics"] == ["mean", "quantiles"]
    assert MetricSpec.from_json(body).mechanism == "square_wave"


def test_estimate_flags_become_the_query() -> None:
    args = build_parser().parse_args(
        ["estimate", "lat", "--quantiles", "0.5,0.95", "--buckets", "8"])
    params = estimate_params(args)
    assert (params["quantiles"], params["buckets"]) == ("0.5,0.95", 8)
    plain = estimate_params(build_parser().parse_args(["estimate", "lat"]))
    assert plain["quantiles"] is None and plain["buckets"] is None
