"""Where the time of one 1000-report batch goes in the collector (in process, no HTTP).

Each stage of ``POST /v1/reports`` is timed on its own, on a real Redis,
with the collector's own functions, over the same pre-built batches:

    parse       bytes -> columns (JSON: orjson + shape check; binary: ``ldp_core.wire``)
    validate    ``collector.ingest.validate`` (specs cached, as in a warm worker)
    tokens      ``TokenService.verify`` (RSA-PSS, OpenSSL, in a worker thread), once
                per distinct token (``--per-token``: how many reports, one device's
                of as many metrics, share one)
    redis       ``Store.ingest``: digests, grouping, one Lua call per slot, pipelined
    answer      the per-report results as JSON (``json_response``)

HTTP (uvicorn, Starlette routing, the key check, reading the body) is what an
end-to-end request costs beyond these: ``benchmarks/bench_ingest.py`` measures
it as the difference with the minimal endpoint.

Run: ``.venv/bin/python benchmarks/profile_ingest.py [--batches 20] [--key-bits 2048]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._table import table
from ldp_core.metric import MetricSpec

__all__ = ["main", "profile"]

#: The bench metric (as in bench_ingest.py): GRR over 64 values.
SPEC_JSON: dict[str, Any] = {
    "name": "bench.ingest", "kind": "categorical", "epsilon": 1.0, "mechanism": "grr",
    "domain": [f"v{i}" for i in range(64)], "epoch": "day", "min_reports": 1,
}


def _median_us(samples: list[float]) -> float:
    return 1e6 * statistics.median(samples)


async def profile(batches: int, key_bits: int, per_token: int,
                  metrics: int = 1) -> list[tuple[str, ...]]:
    """Rows (stage, JSON us/batch, binary us/batch) for ``batches`` batches of 1000."""
    import orjson

    from collector.ingest import EpochWindow, parse_binary, parse_columns, validate
    from collector.store import Store
    from collector.token_crypto import TokenKey
    from collector.tokens import TokenService
    from ldp_core import mechanism
    from ldp_core.wire import encode_binary
    from ldp_server.problems import json_response
    from ldp_server.redis_server import RedisServer
    from tests.support.tokens import mint, test_key

    key = test_key() if key_bits == 1024 else TokenKey.generate(key_bits)
    folder = Path(tempfile.mkdtemp(prefix="ldp-prof-"))
    server = RedisServer.start(folder / "redis")
    try:
        store = Store.connect(server.url, shards=4, retention_seconds=31 * 86400,
                              acceptance_seconds=96 * 3600,
                              tally_retention_seconds=400 * 86400)
        spec_jsons = [dict(SPEC_JSON, name=f"{SPEC_JSON['name']}.{m}") for m in range(metrics)]
        for spec_json in spec_jsons:
            await store.create_metric(MetricSpec.from_json(spec_json))
        now = time.time()
        epoch = int(now // 86400)
        mech = mechanism("grr", epsilon=1.0, domain_size=64)
        n = 1000
        bodies_json: list[bytes] = []
        bodies_bin: list[bytes] = []
        # Report i: metric i % metrics, token i // per_token: a device's reports of
        # per_token (<= metrics) different metrics share its token of the epoch.
        names = [str(body["name"]) for body in spec_jsons]
        metric_of = [names[i % metrics] for i in range(n)]
        for _ in range(batches):
            distinct = [_mint(key, key_bits, mint, epoch) for _ in range(n // per_token)]
            batch: dict[str, list[Any]] = {
                "metric": metric_of, "version": [1] * n, "epoch": [epoch] * n,
                "report_id": [os.urandom(16).hex() for _ in range(n)],
                "token": [distinct[i // per_token] for i in range(n)],
                "payload": [mech.encode(mech.randomize(i % 64)) for i in range(n)],
            }
            bodies_json.append(orjson.dumps(batch))
            bodies_bin.append(encode_binary(batch))
        specs = await store.get_metrics({(name, 1) for name in names})
        window = EpochWindow(now, 31 * 86400, 1, 96 * 3600)
        rows: dict[str, list[float]] = {}
        known = set(names)
        for label, bodies in (("json", bodies_json), ("binary", bodies_bin)):
            # A verifier of its own per format: its cache of verified tokens must not
            # carry the JSON pass's tokens into the binary pass (same tokens).
            service = TokenService.of(key)
            await store.client.flushall()
            for spec_json in spec_jsons:
                await store.create_metric(MetricSpec.from_json(spec_json))
            for body in bodies:
                t0 = time.perf_counter()
                cols = (parse_binary(body) if label == "binary"
                        else parse_columns(orjson.loads(body)))
                t1 = time.perf_counter()
                verdict = validate(cols, specs, known, window)
                t2 = time.perf_counter()
                # TokenService.verify as the router calls it (a worker thread), each
                # batch's tokens fresh (the verifier's cache never hits here).
                good_, _, bad = await service.verify(verdict.valid, verdict.positions)
                t3 = time.perf_counter()
                assert not bad and len(good_) == n, "a token did not verify"
                # Fresh nonces: the store stage is measured on n distinct spent tokens
                # whatever the token sharing (tokens-v2 spends one per (token, metric)).
                good = [r._replace(token=os.urandom(32).hex()) for r in verdict.valid]
                t4 = time.perf_counter()
                outcomes = await store.ingest(good)
                t5 = time.perf_counter()
                assert outcomes.count("accepted") == n, outcomes[:3]
                json_response({"accepted": n, "duplicates": 0, "rejected": 0,
                               "results": [{"status": o, "code": None} for o in outcomes]})
                t6 = time.perf_counter()
                for stage, seconds in (("parse", t1 - t0), ("validate", t2 - t1),
                                       ("tokens", t3 - t2), ("redis", t5 - t4),
                                       ("answer", t6 - t5)):
                    rows.setdefault(f"{label}:{stage}", []).append(seconds)
        await store.close()
    finally:
        server.stop()
    out = []
    for stage in ("parse", "validate", "tokens", "redis", "answer"):
        out.append((stage, *(f"{_median_us(rows[f'{x}:{stage}']):,.0f}"
                             for x in ("json", "binary"))))
    totals = [sum(statistics.median(rows[f"{x}:{s}"]) for s in
                  ("parse", "validate", "tokens", "redis", "answer")) for x in ("json", "binary")]
    out.append(("sum (no HTTP)", *(f"{1e6 * t:,.0f}" for t in totals)))
    out.append(("=> reports/s per core", *(f"{n / t:,.0f}" for t in totals)))
    return out


def _mint(key: Any, bits: int, mint: Callable[..., str], epoch: int) -> str:
    if bits == 1024:
        return mint("day", epoch)
    import secrets

    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import padding

    from ldp_core.tokens import b64url, token_input, unit_digest

    nonce = secrets.token_bytes(32)
    msg = token_input(nonce, unit_digest("day", epoch), key.public.key_id)
    pss = padding.PSS(mgf=padding.MGF1(hashes.SHA384()), salt_length=48)
    return b64url(nonce + key.private.sign(msg, pss, hashes.SHA384()))


def main() -> None:
    """Print the per-stage table."""
    ap = argparse.ArgumentParser(description="per-stage cost of a 1000-report batch")
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--key-bits", type=int, default=2048)
    ap.add_argument("--per-token", type=int, default=1,
                    help="reports sharing one token (tokens-v2: ~20, one device's metrics)")
    ap.add_argument("--metrics", type=int, default=1,
                    help="metrics the batch spreads over (a device's batch: ~20)")
    args = ap.parse_args()
    rows = asyncio.run(profile(args.batches, args.key_bits, args.per_token, args.metrics))
    print(f"1000-report batches over {args.metrics} metric(s), GRR d=64, "
          f"{args.key_bits}-bit token key, {args.per_token} report(s) per token; median us "
          f"per batch over {args.batches}; load average {os.getloadavg()[0]:.2f}\n")
    print(table(("stage", "JSON us/batch", "binary us/batch"), rows))


if __name__ == "__main__":
    main()
