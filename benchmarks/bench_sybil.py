"""The price of a fake install: fresh install keys per minute, before and after the proof of work.

Issue 34 item 1.  An attacker with the app's ingest key mints install keys as
fast as it can against a real collector (one uvicorn worker, its own Redis,
a 2048-bit issuer key) on 127.0.0.1, with every network limit off
(``LDP_INSTALLS_PER_PREFIX_PER_HOUR=0``,
``LDP_INSTALL_REGISTRATIONS_PER_PREFIX_PER_HOUR=0``, no rate limit): what is
left is the price of the work itself.

- **before**: each fake is a fresh random ``LDP-Install-Key`` asking
  ``POST /v1/tokens`` for today's day unit (blinded as a real SDK does):
  ``--threads`` threads for ``--seconds``; a fake counts when its token is
  issued.  This is the issuer without the registration gate (off here:
  ``LDP_INSTALL_REGISTRATION_REQUIRED=false``, the default before issue 34).
- **after**: each fake registers first (``POST /v1/installs`` with a solved
  challenge, the collector's default difficulty): ``--solvers`` processes,
  each solving with ``ldp_core.pow.solve`` (one challenge per process,
  reused: a challenge is not per install); a fake counts on 201.  The CPU
  seconds of the solver processes per fake are the attacker's price; the
  collector's own CPU per registration (one scrypt verification) is given too.

The machine is shared (collector, Redis and attacker on the same cores), so
installs/minute are what this box did; CPU seconds per fake are the
portable figure.  With the limits on, one /24 (or /48) registers at most
``LDP_INSTALL_REGISTRATIONS_PER_PREFIX_PER_HOUR`` (20) an hour whatever the CPU.

Run: ``.venv/bin/python benchmarks/bench_sybil.py [--seconds 20] [--threads 8] [--solvers 2]``
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import secrets
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx

from benchmarks import _smoke
from benchmarks._services import INGEST_KEY, Stack, start_uvicorn
from benchmarks._table import header, table

AUTH = {"Authorization": f"Bearer {INGEST_KEY}"}
#: On-demand price of one vCPU-hour used for the cloud figure: AWS m7g.large (2 vCPU,
#: Linux, us-east-1) at $0.0816/h = $0.0408 per vCPU-hour, as a third-party pricing page
#: dated 2026-06-17 quotes it (no live price list can be read from here).
VCPU_HOUR_USD = 0.0408


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def before(url: str, seconds: float, threads: int) -> int:
    """Tokens issued to fresh install keys in ``seconds`` (``threads`` at once)."""
    from ldp_core.tokens import PublicKey, b64url, prepare

    key = PublicKey.from_json(httpx.get(f"{url}/v1/tokens/key", headers=AUTH).json())
    epoch = int(time.time() // 86400)
    issued = [0] * threads
    end = time.monotonic() + seconds

    def work(i: int) -> None:
        with httpx.Client(headers=AUTH, timeout=30) as client:
            while time.monotonic() < end:
                pending = prepare(key, "day", epoch)
                r = client.post(f"{url}/v1/tokens", headers={
                    "LDP-Install-Key": b64url(secrets.token_bytes(32))},
                    json={"units": [{"period": "day", "epoch": epoch,
                                     "blinded": b64url(pending.blinded)}]})
                if r.status_code == 200 and r.json()["results"][0]["status"] == "issued":
                    issued[i] += 1

    pool = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return sum(issued)


def _solver(url: str, end: float, out: multiprocessing.Queue[tuple[int, float]]) -> None:
    from ldp_core.pow import PowParams, install_digest, solve
    from ldp_core.tokens import b64url, unb64url

    registered = 0
    with httpx.Client(headers=AUTH, timeout=30) as client:
        body = client.post(f"{url}/v1/installs/challenge").json()
        challenge = unb64url(body["challenge"])
        p = body["pow"]
        params = PowParams(n=p["n"], r=p["r"], p=p["p"], bits=p["bits"])
        while time.time() < end:
            key = secrets.token_bytes(32)
            nonce = solve(challenge, install_digest(key), params)
            r = client.post(f"{url}/v1/installs", headers={"LDP-Install-Key": b64url(key)},
                            json={"challenge": body["challenge"], "nonce": nonce})
            registered += r.status_code == 201
    out.put((registered, time.process_time()))


def after(url: str, seconds: float, solvers: int) -> tuple[int, float]:
    """(fakes registered in ``seconds``, the solvers' CPU seconds)."""
    ctx = multiprocessing.get_context("spawn")
    out: multiprocessing.Queue[tuple[int, float]] = ctx.Queue()
    end = time.time() + seconds
    procs = [ctx.Process(target=_solver, args=(url, end, out)) for _ in range(solvers)]
    for p in procs:
        p.start()
    results = [out.get(timeout=seconds + 120) for _ in procs]
    for p in procs:
        p.join()
    return sum(r for r, _ in results), sum(c for _, c in results)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--solvers", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    _smoke.announce("bench_sybil")
    args.seconds, args.threads, args.solvers = _smoke.size(
        (args.seconds, args.threads, args.solvers), (2.0, 2, 1))
    from collector.settings import Settings
    from collector.token_crypto import TokenKey

    load = os.getloadavg()[0]
    with Stack.start() as stack:
        key_file = stack.folder / "issuer-2048.pem"
        key_file.write_bytes(TokenKey.generate(2048).to_pem())
        default = Settings.model_fields
        svc = start_uvicorn("collector.app:create_app", stack.env({
            "LDP_TOKEN_KEY_FILE": str(key_file), "LDP_INSTALLS_PER_PREFIX_PER_HOUR": "0",
            "LDP_INSTALL_REGISTRATIONS_PER_PREFIX_PER_HOUR": "0",
            # "before" is the issuer without its gate (the default until issue 34), and
            # "after" pays the default difficulty (stack.env's is the trivial dev one).
            "LDP_INSTALL_REGISTRATION_REQUIRED": "false",
            **{f"LDP_{name.upper()}": str(default[name].default)
               for name in ("install_pow_n", "install_pow_r", "install_pow_bits")}}),
            stack.folder)
        stack.services.append(svc)
        n_before = before(svc.url, args.seconds, args.threads)
        server0 = _cpu_seconds(svc.pid)
        n_after, solver_cpu = after(svc.url, args.seconds, args.solvers)
        server_cpu = _cpu_seconds(svc.pid) - server0
    params = Settings().install_pow_params()
    per_fake = solver_cpu / max(1, n_after)
    vcpus = 1e6 * per_fake / 3600
    print(header(f"Fake installs per minute, {args.seconds:g} s each, load {load:.1f} before"))
    print(table(
        ["", "fake installs", "per minute", "attacker CPU s / fake",
         "collector CPU ms / fake"],
        [["before (fresh key -> token)", n_before, f"{n_before * 60 / args.seconds:,.0f}",
          "-", "-"],
         [f"after (register: N={params.n} r={params.r} bits={params.bits}, "
          f"{args.solvers} solver processes)", n_after,
          f"{n_after * 60 / args.seconds:,.0f}", f"{per_fake:.2f}",
          f"{server_cpu / max(1, n_after) * 1e3:.1f}"]]))
    print(f"\n1 M fakes an hour: {vcpus:,.0f} vCPUs busy, ${vcpus * VCPU_HOUR_USD:,.2f} an hour "
          f"at ${VCPU_HOUR_USD}/vCPU-hour on demand (m7g.large, us-east-1, as quoted 2026-06-17)")


if __name__ == "__main__":
    main()
