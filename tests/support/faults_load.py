"""A fast load generator for fault tests, run as its own process, and its ledger.

``python -m tests.support.faults_load URL OUT_DIR SEED BATCHES EPOCH`` sends
BATCHES pre-encoded batches of 1000 GRR reports of the metric ``browser``
(version 1, 4 buckets) to the collector at URL, one after the other, retrying
each batch (the very same bytes: the same report ids and tokens, valid tokens
signed with the test issuer key, ``tests.support.tokens``) until it is
answered 200.  It writes, flushed line by line:

    OUT_DIR/attempts.log   "send <batch> <attempt>" before each POST and
                           "done <batch> <attempt> <status|error name>" after it
    OUT_DIR/acks.log       one JSON line per batch answered 200: its index, the
                           attempts it took and one letter per report
                           (a accepted, d duplicate, r rejected)

The batches are a pure function of SEED (``make_batches``) but for the
signatures of the tokens (randomised PSS salt), so the test rebuilds them to
know every report id, payload and token nonce without reading them back.

>>> batches = make_batches(seed=1, count=2, epoch=20000)
>>> [len(b["report_id"]) for b in batches], batches[0]["metric"][0]
([1000, 1000], 'browser')
"""

from __future__ import annotations

import json
import random
import sys
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson

from tests.support.servers import INGEST_KEY, auth
from tests.support.tokens import mint

__all__ = [
    "BATCH",
    "Ledger",
    "load_ledger",
    "main",
    "make_batches",
]

BATCH = 1000
METRIC = "browser"
BUCKETS = 4


def make_batches(seed: int, count: int, epoch: int) -> list[dict[str, list[Any]]]:
    """``count`` columnar batches of BATCH distinct reports (ids and tokens unique)."""
    rng = random.Random(seed)
    out: list[dict[str, list[Any]]] = []
    for _ in range(count):
        out.append({
            "metric": [METRIC] * BATCH,
            "version": [1] * BATCH,
            "epoch": [epoch] * BATCH,
            "report_id": [f"{rng.getrandbits(128):032x}" for _ in range(BATCH)],
            "token": [mint("day", epoch, nonce=rng.getrandbits(256).to_bytes(32, "big"))
                      for _ in range(BATCH)],
            "payload": [rng.randrange(BUCKETS) for _ in range(BATCH)],
        })
    return out


def _send_all(url: str, out: Path, seed: int, count: int, epoch: int, deadline: float) -> int:
    bodies = [orjson.dumps(b) for b in make_batches(seed, count, epoch)]
    headers = {**auth(INGEST_KEY), "Content-Type": "application/json"}
    attempts_log = open(out / "attempts.log", "a", buffering=1)  # noqa: SIM115 - kept open
    acks_log = open(out / "acks.log", "a", buffering=1)  # noqa: SIM115
    print("ready", flush=True)
    with httpx.Client(base_url=url, timeout=5.0) as client:
        for index, body in enumerate(bodies):
            attempt = 0
            while True:
                attempt += 1
                if time.monotonic() > deadline:
                    return 2
                attempts_log.write(f"send {index} {attempt}\n")
                try:
                    r = client.post("/v1/reports", content=body, headers=headers)
                except httpx.HTTPError as exc:
                    attempts_log.write(f"done {index} {attempt} {type(exc).__name__}\n")
                    time.sleep(0.05)
                    continue
                attempts_log.write(f"done {index} {attempt} {r.status_code}\n")
                if r.status_code == 200:
                    letters = "".join(x["status"][0] for x in r.json()["results"])
                    acks_log.write(json.dumps(
                        {"batch": index, "attempts": attempt, "statuses": letters}) + "\n")
                    break
                time.sleep(0.05)
    attempts_log.close()
    acks_log.close()
    return 0


def main(argv: list[str]) -> int:
    url, out, seed, count, epoch = argv[0], Path(argv[1]), int(argv[2]), int(argv[3]), int(argv[4])
    budget = float(argv[5]) if len(argv) > 5 else 300.0
    out.mkdir(parents=True, exist_ok=True)
    return _send_all(url, out, seed, count, epoch, time.monotonic() + budget)


@dataclass
class Ledger:
    """What the generator saw: per batch, its final statuses and attempts."""

    statuses: dict[int, str] = field(default_factory=dict)
    attempts: dict[int, int] = field(default_factory=dict)
    failed_attempts: Counter[str] = field(default_factory=Counter)

    def acknowledged_ids(self, batches: list[dict[str, list[Any]]]) -> list[str]:
        """Every report id answered accepted or duplicate (with repeats, if any)."""
        out = []
        for index, letters in self.statuses.items():
            ids = batches[index]["report_id"]
            out += [rid for rid, s in zip(ids, letters, strict=True) if s in "ad"]
        return out

    def expected_buckets(self, batches: list[dict[str, list[Any]]]) -> list[int]:
        """The tally the acknowledged reports must give, bucket by bucket."""
        counts = [0] * BUCKETS
        for index, letters in self.statuses.items():
            for payload, s in zip(batches[index]["payload"], letters, strict=True):
                if s in "ad":
                    counts[payload] += 1
        return counts


def load_ledger(out: Path) -> Ledger:
    ledger = Ledger()
    for line in _lines(out / "acks.log"):
        row = json.loads(line)
        ledger.statuses[row["batch"]] = row["statuses"]
        ledger.attempts[row["batch"]] = row["attempts"]
    for line in _lines(out / "attempts.log"):
        parts = line.split()
        if parts[0] == "done" and parts[3] != "200":
            ledger.failed_attempts[parts[3]] += 1
    return ledger


def _lines(path: Path) -> Iterable[str]:
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    return [line for line in text.splitlines() if line.strip()]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
