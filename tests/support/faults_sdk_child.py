"""SDK devices in a process of their own, logging every report id they send and
every acknowledgement they get (a wrapping transport, standard library only).

``python -m tests.support.faults_sdk_child URL STATE_DIR LOG STOP_FILE RATE``
records the ``browser`` metric from new devices of one ``Fleet`` (each device
reports once per epoch, as the token demands) at about RATE reports per
second, into the durable sqlite spool (``durability="record"``), until
STOP_FILE exists; then flushes and prints its counters as one JSON line.

LOG gets one JSON line per POST /v1/reports attempt:
``{"ids": [...], "tokens": [...], "t": <monotonic start>, "status": 200,
"retry_after": null, "results": "aad"}`` or ``{"ids": [...], ..., "error":
"TimeoutError"}``.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path

from client_sdk import DeliveryConfig, Fleet, Response, UrllibTransport

__all__ = ["LoggingTransport", "main"]


class LoggingTransport:
    """UrllibTransport (no proxies) that logs report ids and their answers."""

    def __init__(self, log: Path) -> None:
        self._inner = UrllibTransport(use_env_proxies=False)
        self._log = open(log, "a", buffering=1)  # noqa: SIM115 - closed by close()
        self._lock = threading.Lock()

    def send(
        self, method: str, url: str, headers: Mapping[str, str], body: bytes | None,
        timeout: float,
    ) -> Response:
        ids: list[str] = []
        tokens: list[str] = []
        if body is not None and url.endswith("/v1/reports"):
            raw = body
            if any(k.lower() == "content-encoding" and v == "gzip" for k, v in headers.items()):
                raw = gzip.decompress(body)
            batch = json.loads(raw)
            ids, tokens = batch["report_id"], batch["token"]
        started = time.monotonic()
        try:
            response = self._inner.send(method, url, headers, body, timeout)
        except OSError as exc:
            if ids:
                self._write({"ids": ids, "tokens": tokens, "t": started,
                             "error": type(exc).__name__})
            raise
        if ids:
            row: dict[str, object] = {"ids": ids, "tokens": tokens, "t": started,
                                      "status": response.status,
                                      "retry_after": response.header("retry-after")}
            if response.status == 200:
                results = json.loads(response.body)["results"]
                row["results"] = "".join(r["status"][0] for r in results)
            self._write(row)
        return response

    def _write(self, row: dict[str, object]) -> None:
        with self._lock:
            self._log.write(json.dumps(row) + "\n")

    def close(self) -> None:
        self._log.close()


def main(argv: list[str]) -> int:
    url, state, log, stop = argv[0], Path(argv[1]), Path(argv[2]), Path(argv[3])
    rate = float(argv[4])
    transport = LoggingTransport(log)
    fleet = Fleet(
        url, api_key=argv[5] if len(argv) > 5 else "", transport=transport, state_dir=state,
        delivery=DeliveryConfig(batch_size=250, interval=0.2, request_timeout=2.0,
                                backoff_base=0.1, backoff_max=1.0, retry_after_max=2.0,
                                durability="record", max_reports=1_000_000, max_bytes=1 << 30),
    )
    deadline = time.monotonic() + 30
    while not fleet.refresh_metrics(2):
        if time.monotonic() > deadline:
            print(json.dumps({"error": "no specs"}), flush=True)
            return 1
    print("ready", flush=True)
    recorded = 0
    start = time.monotonic()
    while not stop.exists() and time.monotonic() - start < 600:
        if fleet.device().record("browser", "firefox").ok:
            recorded += 1
        lag = recorded / rate - (time.monotonic() - start)
        if lag > 0:
            time.sleep(lag)
    flushed = fleet.flush(120)
    counters = dataclasses.asdict(fleet.counters())
    fleet.close(5)
    transport.close()
    print(json.dumps({"recorded": recorded, "flushed": flushed, "counters": counters}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
