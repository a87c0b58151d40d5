"""Locust load test: SDK-shaped device batches into the collector, analysts on the aggregator.

``DeviceUser`` (FastHttpUser) stands for a gateway of phones: every request
is the batch that ``client_sdk`` would send (columnar ``ldp_core.wire`` batch,
gzip, ``Authorization: Bearer <ingest key>``) holding, for each of
``LDP_LT_DEVICES`` fresh devices (a fresh 32-byte secret each, so each has its
own per-epoch tokens), one report per load-test metric, randomised on the
"device" with ldp_core (OS CSPRNG).  Between batches it thinks for
``LDP_LT_THINK_MIN``..``LDP_LT_THINK_MAX`` seconds.  A request fails unless it
answers 200 with every report accepted.  Every answer's accepted count per
metric is appended to ``$LDP_LT_LOG_DIR/accepted-<pid>.jsonl``, so the run can
be checked against what Redis holds (``loadtest/check.py``).

``AnalystUser`` queries ``GET /v1/estimates/{name}`` on ``LDP_AGGREGATOR_URL``
with the analyst key; its weight is ``LDP_LT_ANALYST_WEIGHT`` (default 1 when
an aggregator URL is given, else 0: disabled), and while enabled
``LDP_LT_ANALYSTS`` (default 1) of the users are analysts.

Environment (set by ``loadtest/run.sh``):

    LDP_LT_SPECS          JSON file: the registered specs (POST /v1/metrics answers)
    LDP_INGEST_KEY        ingest key for POST /v1/reports
    LDP_ANALYST_KEY       analyst key (AnalystUser)
    LDP_AGGREGATOR_URL    aggregator base URL on 127.0.0.1 (optional)
    LDP_LT_LOG_DIR        where accepted counts are logged (required)
    LDP_LT_DEVICES        devices per batch (default 4)
    LDP_LT_THINK_MIN/MAX  think time in seconds (default 0.5 / 2.0)
"""

from __future__ import annotations

import gzip
import json
import os
import random
import secrets
import sys
import time
from pathlib import Path
from typing import Any, ClassVar, TextIO
from urllib.parse import urlsplit

import orjson
from locust import FastHttpUser, between, task

from ldp_core.metric import MetricSpec
from ldp_core.wire import Envelope, encode_batch
from tests.support.tokens import mint

sys.path.insert(0, str(Path(__file__).resolve().parent))
from specs import SPEC_BODIES  # noqa: F401 - re-exported for run.sh

SPEC_FILE = os.environ.get("LDP_LT_SPECS", "")
INGEST_KEY = os.environ.get("LDP_INGEST_KEY", "")
ANALYST_KEY = os.environ.get("LDP_ANALYST_KEY", "")
AGGREGATOR_URL = os.environ.get("LDP_AGGREGATOR_URL", "").rstrip("/")
LOG_DIR = os.environ.get("LDP_LT_LOG_DIR", "")
DEVICES = int(os.environ.get("LDP_LT_DEVICES", "4"))
THINK_MIN = float(os.environ.get("LDP_LT_THINK_MIN", "0.5"))
THINK_MAX = float(os.environ.get("LDP_LT_THINK_MAX", "2.0"))
ANALYST_WEIGHT = int(os.environ.get("LDP_LT_ANALYST_WEIGHT", "1" if AGGREGATOR_URL else "0"))
#: How many of the users are analysts (spawned first) while the analyst user is enabled.
ANALYSTS = int(os.environ.get("LDP_LT_ANALYSTS", "1")) if ANALYST_WEIGHT > 0 else 0

if AGGREGATOR_URL and urlsplit(AGGREGATOR_URL).hostname not in ("127.0.0.1", "localhost"):
    raise SystemExit("the load test talks to loopback only: LDP_AGGREGATOR_URL must be local")

def load_specs(path: str) -> list[MetricSpec]:
    """The registered specs (with their versions) from run.sh's JSON file."""
    raw = json.loads(Path(path).read_text())
    return [MetricSpec.from_json(item) for item in raw]


def true_value(spec: MetricSpec, rng: random.Random) -> object:
    """A plausible true value of a device (Zipf-like categories, skewed numbers)."""
    if spec.kind == "boolean":
        return rng.random() < 0.3
    if spec.kind == "categorical":
        weights = [1.0 / (i + 1) ** 1.1 for i in range(len(spec.domain))]
        return rng.choices(spec.domain, weights)[0]
    assert spec.lo is not None and spec.hi is not None
    return min(spec.hi, max(spec.lo, rng.gammavariate(2.0, 400.0)))


class _Log:
    """Per-process append-only JSONL of accepted counts (opened lazily after fork)."""

    handle: TextIO | None = None
    pid: int = 0

    @classmethod
    def write(cls, record: dict[str, Any]) -> None:
        if not LOG_DIR:
            return
        if cls.handle is None or cls.pid != os.getpid():
            cls.pid = os.getpid()
            Path(LOG_DIR).mkdir(parents=True, exist_ok=True)
            cls.handle = open(Path(LOG_DIR) / f"accepted-{cls.pid}.jsonl", "a")  # noqa: SIM115
        cls.handle.write(json.dumps(record) + "\n")
        cls.handle.flush()


_SPECS: list[MetricSpec] = load_specs(SPEC_FILE) if SPEC_FILE else []


class DeviceUser(FastHttpUser):
    """A gateway of phones sending SDK-shaped gzip batches to POST /v1/reports."""

    wait_time = between(THINK_MIN, THINK_MAX)
    weight = 10
    specs: ClassVar[list[MetricSpec]] = _SPECS

    def on_start(self) -> None:
        if not self.specs:
            raise RuntimeError("LDP_LT_SPECS is not set or empty: run via loadtest/run.sh")
        self.rng = random.Random()

    def build_batch(self) -> list[Envelope]:
        """One report per metric for each of DEVICES fresh devices."""
        now = time.time()
        out = []
        for _ in range(DEVICES):
            for spec in self.specs:
                m = spec.build()
                epoch = spec.epoch_at(now)
                report = m.randomize(spec.index_of(true_value(spec, self.rng)))
                out.append(Envelope(
                    spec.name, spec.version, epoch, secrets.token_hex(16),
                    mint(spec.epoch, epoch), m.encode(report),
                ))
        return out

    @task
    def send_batch(self) -> None:
        envelopes = self.build_batch()
        body = gzip.compress(orjson.dumps(encode_batch(envelopes)), compresslevel=6, mtime=0)
        headers = {
            "Authorization": f"Bearer {INGEST_KEY}",
            "Content-Type": "application/json",
            "Content-Encoding": "gzip",
        }
        sent: dict[str, int] = {}
        for e in envelopes:
            sent[e.metric] = sent.get(e.metric, 0) + 1
        # geventhttpclient sends bytes as they are; the stub only names str | dict.
        with self.client.post("/v1/reports", data=body, headers=headers,  # type: ignore[arg-type]
                              name="/v1/reports", catch_response=True) as resp:
            accepted: dict[str, int] = {}
            if resp.status_code == 200:
                try:
                    answer = orjson.loads(resp.content or b"{}")
                    results = answer["results"]
                except (orjson.JSONDecodeError, KeyError, TypeError):
                    resp.failure("200 without a results list")
                    _Log.write({"sent": sent, "accepted": accepted, "ok": False})
                    return
                for e, result in zip(envelopes, results, strict=False):
                    if result.get("status") == "accepted":
                        accepted[e.metric] = accepted.get(e.metric, 0) + 1
                if answer.get("accepted") != len(envelopes):
                    codes = {r.get("code") for r in results if r.get("status") != "accepted"}
                    resp.failure(f"accepted {answer.get('accepted')} of {len(envelopes)}: {codes}")
                else:
                    resp.success()
            else:
                resp.failure(f"HTTP {resp.status_code}: {(resp.text or '')[:200]}")
            _Log.write({"sent": sent, "accepted": accepted, "ok": resp.status_code == 200})


class AnalystUser(FastHttpUser):
    """An analyst reading estimates from the aggregator (disabled with weight 0)."""

    wait_time = between(1.0, 3.0)
    weight = ANALYST_WEIGHT
    fixed_count = ANALYSTS
    specs: ClassVar[list[MetricSpec]] = _SPECS

    @task
    def read_estimate(self) -> None:
        spec = random.choice(self.specs)
        # An absolute URL: locust's --host (the collector) applies to every user class.
        with self.client.get(f"{AGGREGATOR_URL}/v1/estimates/{spec.name}",
                             headers={"Authorization": f"Bearer {ANALYST_KEY}"},
                             name="/v1/estimates/[name]", catch_response=True) as resp:
            if resp.status_code != 200:
                resp.failure(f"HTTP {resp.status_code}: {(resp.text or '')[:200]}")
