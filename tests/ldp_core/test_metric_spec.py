"""The metric spec: validation per field, round trips, value mapping, epochs."""

from __future__ import annotations

import pytest

from ldp_core.metric import MetricSpec, SpecError

CATEGORICAL = {
    "name": "browser",
    "kind": "categorical",
    "domain": ["firefox", "chrome", "safari", "edge"],
    "epsilon": 1.0,
    "mechanism": "auto",
    "epoch": "day",
    "min_reports": 50,
}


def test_every_bad_field_is_named_at_once() -> None:
    with pytest.raises(SpecError) as info:
        MetricSpec.from_json(
            {
                "name": "Bad Name",
                "kind": ["categorical"],
                "epsilon": float("nan"),
                "mechanism": "laplace",
                "epoch": "week",
                "unit": "",
                "longitudinal": {"epsilon_inf": -1},
                "min_reports": -3,
                "colour": "red",
            }
        )
    assert set(info.value.errors) == {
        "name",
        "kind",
        "epsilon",
        "mechanism",
        "epoch",
        "unit",
        "longitudinal",
        "min_reports",
        "colour",
    }
    assert "['categorical']" in info.value.errors["kind"]
    assert "laplace" in info.value.errors["mechanism"]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"domain": ["only"]}, "domain"),
        ({"domain": ["a", "a"]}, "domain"),
        ({"domain": "abc"}, "domain"),
        ({"mechanism": "one_bit_mean"}, "mechanism"),
        ({"longitudinal": {"epsilon_inf": 0.5}}, "longitudinal"),
        ({"longitudinal": {"eps": 2.0}}, "longitudinal"),
    ],
)
def test_categorical_field_errors(change: dict[str, object], field: str) -> None:
    with pytest.raises(SpecError) as info:
        MetricSpec.from_json({**CATEGORICAL, **change})
    assert field in info.value.errors


def test_numeric_bounds_are_checked() -> None:
    with pytest.raises(SpecError) as info:
        MetricSpec.from_json({"name": "m", "kind": "numeric", "lo": 5, "hi": 5, "epsilon": 1})
    assert "lo" in info.value.errors


@pytest.mark.parametrize(
    "data",
    [
        CATEGORICAL,
        {**CATEGORICAL, "mechanism": "olh", "longitudinal": {"epsilon_inf": 4.0}},
        {"name": "opted_in", "kind": "boolean", "epsilon": 0.8},
        {"name": "opted_in", "kind": "boolean", "epsilon": 0.8, "longitudinal": {"epsilon_inf": 2}},
        {"name": "minutes", "kind": "numeric", "lo": 0, "hi": 600, "epsilon": 1.0, "epoch": "hour"},
    ],
)
def test_specs_round_trip_through_json(data: dict[str, object]) -> None:
    spec = MetricSpec.from_json(data)
    again = MetricSpec.from_json(spec.to_json())
    assert again == spec
    assert again.build().describe() == spec.build().describe()
    assert spec.mechanism != "auto"


def test_auto_is_resolved_and_recorded() -> None:
    small = MetricSpec.from_json(CATEGORICAL)
    assert small.mechanism == "grr"
    wide = MetricSpec.from_json({**CATEGORICAL, "domain": [f"v{i}" for i in range(500)]})
    assert wide.mechanism == "olh"
    assert wide.to_json()["params"]["num_counters"] == wide.build().num_counters


def test_values_map_to_mechanism_inputs() -> None:
    spec = MetricSpec.from_json(CATEGORICAL)
    assert spec.index_of("safari") == 2
    with pytest.raises(ValueError, match="'opera'"):
        spec.index_of("opera")
    flag = MetricSpec.from_json({"name": "f", "kind": "boolean", "epsilon": 1.0})
    assert flag.index_of(True) == 1 and flag.index_of(0) == 0
    with pytest.raises(ValueError, match=r"0\.5"):
        flag.index_of(0.5)
    minutes = MetricSpec.from_json(
        {"name": "m", "kind": "numeric", "lo": 0, "hi": 60, "epsilon": 1}
    )
    assert minutes.index_of(12.5) == 12.5
    with pytest.raises(ValueError, match="61"):
        minutes.index_of(61)


def test_epochs_and_units() -> None:
    daily = MetricSpec.from_json(CATEGORICAL)
    assert daily.epoch_at(86400 * 20000 + 5) == 20000
    assert daily.unit_text() == "per device, per metric, per day"
    hourly = MetricSpec.from_json({**CATEGORICAL, "epoch": "hour", "unit": "user"})
    assert hourly.epoch_at(3600 * 7 - 1) == 6
    assert hourly.unit_text() == "per user, per metric, per hour"


@pytest.mark.parametrize(
    "label", ["a\x00b", "evil\u202eexe.txt", "x\u2066y\u2069", "tab\there", "line\u2028break",
              "zero\u200bwidth", "\ue000private"],
)
def test_labels_that_hide_or_reorder_text_are_refused(label: str) -> None:
    """A label is drawn on the dashboard and printed by the CLI: no control, bidi,
    zero-width, private-use or separator character may reach them."""
    body = {"name": "os", "kind": "categorical", "epsilon": 1.0, "domain": ["ok", label]}
    with pytest.raises(SpecError, match="category 1"):
        MetricSpec.from_json(body)
    with pytest.raises(SpecError, match="unit"):
        MetricSpec.from_json({**body, "domain": ["ok", "fine"], "unit": label})


def test_costly_and_pointless_specs_are_refused_at_the_boundary() -> None:
    """The issue's stalls: a unary domain of 65,536 (each report sets ~18,000 counters),
    hourly epochs over a huge tally, and an epsilon that randomises nothing."""
    labels = [f"c{i}" for i in range(65536)]
    base = {"name": "big", "kind": "categorical", "epsilon": 1.0, "domain": labels}
    with pytest.raises(SpecError, match="counters per report"):
        MetricSpec.from_json({**base, "mechanism": "oue"})
    with pytest.raises(SpecError, match="epochs a month"):
        MetricSpec.from_json({**base, "mechanism": "olh", "epoch": "hour"})
    assert MetricSpec.from_json({**base, "mechanism": "olh"}).mechanism == "olh"
    with pytest.raises(SpecError, match="at most 10"):
        MetricSpec.from_json({**base, "domain": ["a", "b"], "epsilon": 50.0})
    with pytest.raises(SpecError, match="at most 20"):
        MetricSpec.from_json({**base, "domain": ["a", "b"], "longitudinal": {"epsilon_inf": 30}})
