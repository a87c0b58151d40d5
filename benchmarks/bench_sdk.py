"""Median cost of ``Client.record`` per mechanism, and a 20,000-device fleet.

    .venv/bin/python benchmarks/bench_sdk.py [--n 3000]      # or ldp bench --only sdk

``record`` is timed end to end (spec lookup, domain check, ledger, CSPRNG
randomisation, token, report id, queue) with no network: the collector URL is
a dead loopback port and the background thread is off.  Two durabilities:
"record" (each record committed to the sqlite spool before it returns; survives
kill -9) and "batch" (memory queue, written by the sender every 50 ms).
Targets (issue 5): <= 50 us for grr and olh, <= 300 us for oue with d = 1024.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import _smoke
from benchmarks._table import header, table
from client_sdk import Client, DeliveryConfig, Fleet, Response
from ldp_core.tokens import b64url, unb64url

__all__ = ["CASES", "GOALS_US", "fleet_run", "median_record_us", "section"]

CASES: list[tuple[str, dict[str, Any], object]] = [
    ("grr d=8", {"kind": "categorical", "domain": [f"c{i}" for i in range(8)],
                 "mechanism": "grr"}, "c3"),
    ("olh d=1024", {"kind": "categorical", "domain": [f"c{i}" for i in range(1024)],
                    "mechanism": "olh"}, "c700"),
    ("oue d=1024", {"kind": "categorical", "domain": [f"c{i}" for i in range(1024)],
                    "mechanism": "oue"}, "c700"),
    ("sue d=64", {"kind": "categorical", "domain": [f"c{i}" for i in range(64)],
                  "mechanism": "sue"}, "c7"),
    ("binary_rr", {"kind": "boolean", "mechanism": "binary_rr"}, True),
    ("one_bit_mean", {"kind": "numeric", "lo": 0, "hi": 60}, 12.5),
    ("grr d=8 memoised", {"kind": "categorical", "domain": [f"c{i}" for i in range(8)],
                          "mechanism": "grr", "longitudinal": {"epsilon_inf": 4.0}}, "c3"),
    ("oue d=1024 memoised", {"kind": "categorical", "domain": [f"c{i}" for i in range(1024)],
                             "mechanism": "oue", "longitudinal": {"epsilon_inf": 4.0}}, "c700"),
]


#: Issue 5's targets for the median ``record`` (durability "record", the default).
GOALS_US = {"grr d=8": 50.0, "olh d=1024": 50.0, "oue d=1024": 300.0}


def spec(i: int, body: dict[str, Any]) -> dict[str, Any]:
    return {"name": f"bench{i}", "epsilon": 1.0, **body}


def median_record_us(durability: str, n: int) -> dict[str, float]:
    """Median record cost per case, each case with a fresh Client and state_dir."""
    out: dict[str, float] = {}
    for i, (label, body, value) in enumerate(CASES):
        metrics = [spec(i, body)]
        name = f"bench{i}"
        with tempfile.TemporaryDirectory() as state:
            c = Client("http://127.0.0.1:9", api_key="k", state_dir=state, background=False,
                       metrics=metrics, budgets={name: 1e300},
                       delivery=DeliveryConfig(durability=durability, max_reports=10**7,
                                               max_bytes=10**10))
            for _ in range(50):
                assert c.record(name, value).ok                  # warm up
            times = []
            for _ in range(n):
                t = time.perf_counter()
                c.record(name, value)
                times.append(time.perf_counter() - t)
            assert c.counters().queued == n + 50
            out[label] = statistics.median(times) * 1e6
            c.close(0)
    return out


class Sink:
    """A transport that answers like the collector, without a network: reports are
    accepted, and ``POST /v1/tokens`` is blind-signed with an in-process issuer key
    (the SDK asks for a token per device and epoch before it sends)."""

    def __init__(self) -> None:
        from collector.token_crypto import TokenKey

        self.key = TokenKey.generate(2048)

    def send(self, method: str, url: str, headers: Any, body: bytes | None,
             timeout: float) -> Response:
        json_headers = {"Content-Type": "application/json"}
        if url.endswith("/v1/tokens/key"):
            return Response(200, json_headers, json.dumps(self.key.public.to_json()).encode())
        assert body is not None
        raw = gzip.decompress(body) if body[:2] == b"\x1f\x8b" else body
        if url.endswith("/v1/tokens"):
            units = json.loads(raw)["units"]
            return Response(200, json_headers, json.dumps({
                "key_id": self.key.public.key_id.hex(),
                "results": [{"status": "issued", "blind_sig": b64url(
                    self.key.blind_sign(unb64url(u["blinded"])))} for u in units]}).encode())
        n = len(json.loads(raw)["report_id"])
        return Response(200, json_headers, json.dumps(
            {"results": [{"status": "accepted", "code": None}] * n}).encode())


def fleet_run(devices: int) -> tuple[float, float, int]:
    metrics = [spec(0, CASES[0][1]), spec(1, CASES[1][1]), spec(2, CASES[5][1])]
    sink = Sink()
    fleet = Fleet("http://127.0.0.1:9", api_key="k", transport=sink, metrics=metrics,
                  background=False, issuer_keys=[sink.key.public.key_id.hex()])
    t0 = time.perf_counter()
    for _ in range(devices):
        d = fleet.device()
        d.record("bench0", "c3")
        d.record("bench1", "c700")
        d.record("bench2", 12.5)
    t1 = time.perf_counter()
    assert fleet.flush(120)
    t2 = time.perf_counter()
    sent = fleet.counters().sent
    fleet.close(0)
    return t1 - t0, t2 - t1, sent


def section(quick: bool = False) -> str:
    """The SDK tables (Markdown): median ``record`` per mechanism and durability, goals,
    and the fleet's record cost."""
    n, devices = _smoke.size((500, 2_000) if quick else (3_000, 20_000), (200, 100))
    durable = median_record_us("record", n)
    batched = median_record_us("batch", n)
    rows = [(label, f"{durable[label]:.1f}", f"{batched[label]:.1f}",
             f"<= {GOALS_US[label]:.0f}" if label in GOALS_US else "",
             ("met" if durable[label] <= GOALS_US[label] else "MISSED")
             if label in GOALS_US else "") for label in durable]
    rec, flush, sent = fleet_run(devices)
    return "\n".join([
        header("Client SDK (Client.record, no network)"),
        f"Median over {n:,} records per case, each case a fresh Client and state folder; "
        "the background sender is off.  durability=record commits each report to the "
        "SQLite spool (WAL) before `record` returns; durability=batch queues in memory "
        "and the sender writes every 50 ms.\n",
        table(("mechanism", "us, durability=record", "us, durability=batch",
               "goal (record)", "verdict"), rows),
        "",
        f"Fleet (client_sdk.Fleet, background off): {devices:,} devices x 3 metrics, "
        f"record {rec:.2f} s ({rec / (3 * devices) * 1e6:.1f} us/record); a token per device "
        f"(blind-signed by an in-process 2048-bit issuer) + encode + gzip + answer "
        f"{flush:.2f} s for {sent:,} reports (a sink transport, no network).",
    ]) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=3000, help="records timed per mechanism")
    parser.add_argument("--devices", type=int, default=20_000)
    args = parser.parse_args()
    durable = median_record_us("record", args.n)
    batched = median_record_us("batch", args.n)
    print(f"{'mechanism':<22} {'durability=record':>18} {'durability=batch':>17}   (median us)")
    for label in durable:
        print(f"{label:<22} {durable[label]:>18.1f} {batched[label]:>17.1f}")
    rec, flush, sent = fleet_run(args.devices)
    print(f"\nFleet: {args.devices} devices x 3 metrics: record {rec:.2f} s "
          f"({rec / (3 * args.devices) * 1e6:.1f} us/record), "
          f"tokens+encode+gzip+answer {flush:.2f} s for {sent} reports (no network)")


if __name__ == "__main__":
    main()
