"""The analyst's side of the API: dates and relative windows, CSV / JSON lines, the client.

Real HTTP against a real Redis (``analyst_world``).  No statistical tolerance
here: every check compares two answers of the same server over the same
tallies (the date form against the epoch form, the CSV against the JSON).
"""

from __future__ import annotations

import csv
import io
import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from aggregator.client import ApiError, Client
from aggregator.export import COLUMNS
from ldp_server.redis_server import RedisServer
from tests.aggregator.analyst_world import PLANS, world
from tests.support.reports import current
from tests.support.servers import ANALYST_KEY, auth

DAY, HOUR = 86400, 3600


@pytest.fixture(scope="module")
def live(
    redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    with world(redis_server, tmp_path_factory.mktemp("agg")) as w:
        yield w


def get(live: dict[str, Any], path: str, **params: Any) -> httpx.Response:
    return httpx.get(live["url"] + path, params=params, headers=auth(ANALYST_KEY), timeout=30)


def day(epoch: int) -> str:
    return time.strftime("%Y-%m-%d", time.gmtime(epoch * 86400))


def during(epoch_seconds: int, ask: Callable[[], httpx.Response]) -> tuple[Any, range]:
    """The JSON of ``ask()`` and the current epochs (real clock) it may have been answered
    in: ``since`` counts back from the aggregator's now, and an epoch may end mid-request."""
    first = current(epoch_seconds)
    body = ask().json()
    return body, range(first, current(epoch_seconds) + 1)


def test_dates_and_since_select_the_same_epochs_as_numbers(live: dict[str, Any]) -> None:
    today = live["today"]
    by_number = get(live, "/v1/estimates/plan", start=today - 3, end=today + 1).json()
    by_date = get(live, "/v1/estimates/plan", start=day(today - 3), end=day(today + 1)).json()
    assert by_number["window"] == by_date["window"]
    assert by_date["window"]["start"] == today - 3 and by_date["window"]["end"] == today + 1
    assert by_date["estimate"] == by_number["estimate"] and by_date["n"] == 8000
    # since=7d: today and the six days before: the reports of today and of 3 days ago.
    # "Today" is the aggregator's at the request (``during``): midnight may have passed
    # since the world was built; its reports stay inside the window either way.
    week, days = during(DAY, lambda: get(live, "/v1/estimates/plan", since="7d"))
    assert week["window"]["start"] + 6 in days and week["window"]["end"] is None
    assert week["window"]["epochs"] == 2 and week["n"] == 8000
    assert get(live, "/v1/estimates/plan", since="2w").json()["window"]["epochs"] == 3
    # An hourly metric counts the same words in hours: 1d is 24 epochs.
    hour = live["hour"]
    last_day, hours = during(HOUR, lambda: get(live, "/v1/estimates/beta_on", since="1d"))
    assert last_day["window"]["start"] + 23 in hours and last_day["window"]["epochs"] == 1
    assert get(live, "/v1/estimates/beta_on", since="2d").json()["window"]["epochs"] == 2
    # A date on an hourly metric is midnight UTC; end is exclusive in both forms.
    midnight = get(live, "/v1/estimates/beta_on", start=day(hour // 24)).json()
    assert midnight["window"]["start"] == (hour // 24) * 24
    iso = get(live, "/v1/estimates/beta_on", start=f"{day(hour // 24)}T05:30Z").json()
    assert iso["window"]["start"] == (hour // 24) * 24 + 5
    # The comparison takes the same windows.
    cmp = get(live, "/v1/estimates/plan/compare", a="free", b="pro", since="7d").json()
    assert cmp["window"]["epochs"] == 2 and cmp["decision"]["verdict"] == "greater"


@pytest.mark.parametrize(
    ("params", "code"),
    [
        ({"start": "2026-13-01"}, "bad_date"),
        ({"start": "2026-02-30"}, "bad_date"),
        ({"start": "2026-11-05", "end": "2026-11-01"}, "bad_window"),
        ({"since": "7d", "start": "2026-11-01"}, "bad_date"),
        ({"start": "yesterday"}, "invalid_request"),
        ({"since": "7 days"}, "invalid_request"),
        ({"format": "xlsx"}, "invalid_request"),
    ],
)
def test_bad_dates_are_422_with_a_stable_code(
    live: dict[str, Any], params: dict[str, str], code: str
) -> None:
    for path in ("/v1/estimates/plan", "/v1/estimates/plan/compare"):
        if path.endswith("compare") and "format" in params:
            continue
        r = get(live, path, **params, a="free", b="pro") if "compare" in path else get(
            live, path, **params)
        assert r.status_code == 422, (path, params, r.text)
        assert r.headers["content-type"].startswith("application/problem+json")
        assert r.json()["code"] == code, r.text
        detail = r.json()["detail"]
        if code == "bad_date":  # the message names the bad value, or the conflict
            assert any(v in detail for v in params.values()) or "not both" in detail, detail


def test_csv_and_json_lines_hold_the_json_estimate_and_series(live: dict[str, Any]) -> None:
    body = get(live, "/v1/estimates/plan", series="epoch", consistent="true").json()
    r = get(live, "/v1/estimates/plan", series="epoch", consistent="true", format="csv")
    assert r.status_code == 200 and r.headers["content-type"] == "text/csv; charset=utf-8"
    assert r.headers["content-disposition"] == 'attachment; filename="plan-v1.csv"'
    rows = list(csv.DictReader(io.StringIO(r.text)))
    assert tuple(rows[0]) == COLUMNS
    assert len(rows) == len(PLANS) * (1 + len(live["days"]))
    window = [row for row in rows if row["scope"] == "window"]
    for row, value in zip(window, body["estimate"]["values"], strict=True):
        assert row["category"] == value["category"]
        assert float(row["value"]) == value["value"] and float(row["ci_low"]) == value["ci_low"]
        assert float(row["consistent"]) == value["consistent"]
    epochs = sorted({int(row["epoch"]) for row in rows if row["scope"] == "epoch"})
    assert epochs == sorted(live["days"])
    first = next(row for row in rows if row["scope"] == "epoch")
    assert first["from_utc"] == day(epochs[0]) + "T00:00:00Z"
    assert first["to_utc"] == day(epochs[0] + 1) + "T00:00:00Z"
    # JSON lines: the same rows, typed; also chosen by the Accept header.
    lines = httpx.get(live["url"] + "/v1/estimates/plan",
                      params={"series": "epoch", "consistent": "true"},
                      headers={**auth(ANALYST_KEY), "Accept": "application/x-ndjson"})
    assert lines.headers["content-type"].startswith("application/x-ndjson")
    objects = [json.loads(x) for x in lines.text.splitlines()]
    assert len(objects) == len(rows) and objects[0]["value"] == body["estimate"]["values"][0][
        "value"]
    assert objects[0]["suppressed"] is False and objects[0]["epoch"] is None
    # A suppressed window is one row with its reason and no numbers.
    empty = get(live, "/v1/estimates/plan", start=1, end=2, format="csv").text
    (only,) = list(csv.DictReader(io.StringIO(empty)))
    assert only["suppressed"] == "true" and only["reason"] == "no reports in the window"
    assert only["value"] == ""


def test_python_client_returns_dicts_and_frames(live: dict[str, Any]) -> None:
    client = Client(live["url"], ANALYST_KEY)
    names = {m["name"]: m for m in client.metrics()}
    assert set(names) == {"plan", "beta_on"}
    assert names["plan"]["unit_text"] == "per device, per metric, per day"
    week = client.estimate("plan", since="7d", consistent=True)
    assert week["n"] == 8000 and "consistent" in week["estimate"]["values"][0]
    same = client.estimate("plan", start=day(live["today"] - 6))
    assert same["estimate"] == client.estimate("plan", since="7d")["estimate"]
    rows = client.rows("plan", series="epoch")
    assert len(rows) == len(PLANS) * 4 and rows[0]["metric"] == "plan"
    # Numbers as numbers (they were the CSV's strings); an empty cell is None.
    first = rows[0]
    whole = client.estimate("plan")["estimate"]["values"][0]
    assert first["value"] == whole["value"] and isinstance(first["value"], float)
    assert isinstance(first["n"], int) and isinstance(first["version"], int)
    assert first["suppressed"] is False and first["epoch"] is None
    assert all(isinstance(r["epoch"], int) for r in rows if r["scope"] == "epoch")
    assert client.compare("plan", a="free", b="pro")["decision"]["verdict"] == "greater"
    with pytest.raises(ApiError) as bad:
        client.estimate("plan", start="2026-02-30")
    assert bad.value.status == 422 and bad.value.code == "bad_date"
    with pytest.raises(ApiError) as missing:
        client.estimate("nope")
    assert missing.value.code == "unknown_metric"
    with pytest.raises(ApiError) as wrong:
        Client(live["url"], "wrong-key-0123456789abcdef").metrics()
    assert wrong.value.status == 401
    pd = pytest.importorskip("pandas")
    frame = client.estimate("plan", series=True, frame=True)
    assert isinstance(frame, pd.DataFrame) and list(frame.columns) == list(COLUMNS)
    assert len(frame) == len(PLANS) * 4
