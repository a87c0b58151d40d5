"""How fast this machine's cores are while a benchmark runs: a reference workload, sampled.

The cores of this (shared) machine do not run at one speed: a fixed piece of
Python takes 10 to 15 ms of CPU time from one second to the next on an idle
machine, and a benchmark an hour later can find everything twice as slow.  A
cost measured in one run and a cost measured in another are then only
comparable in the machine's speed of the moment.  ``Probe`` measures that
speed all along: a side process runs ``unit_ms()`` (a fixed ~1 ms of interpreter
work) every ``interval`` seconds and records the CPU time it took (its own
thread time: waiting for a core does not count, a slower core does), on the
system-wide monotonic clock; ``Probe.speed(t0, t1)`` is the mean over a
window.  A cost divided by the speed of its window is in "reference units",
comparable across runs (``benchmarks/capacity.py``).

    with Probe.start() as probe:
        t0 = time.monotonic(); work(); t1 = time.monotonic()
        ms = probe.speed(t0, t1)   # CPU ms per unit_ms() while work() ran

It costs ~2 % of one core at the default interval.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["LOOPS", "Probe", "unit_ms"]

#: Iterations of ``unit``: about 1 ms of CPU on this machine's cores.
LOOPS = 20_000


def unit_ms() -> float:
    """CPU ms (this thread's) of one fixed unit of interpreter work."""
    start = time.thread_time()
    s = 0
    for i in range(LOOPS):
        s += i * i % 7
    return 1e3 * (time.thread_time() - start)


@dataclass
class Probe:
    """A side process sampling ``unit_ms`` into a file (``start`` / ``stop``)."""

    process: subprocess.Popen[bytes]
    path: Path
    _tmp: tempfile.TemporaryDirectory[str]

    @classmethod
    def start(cls, interval: float = 0.05) -> Probe:
        tmp = tempfile.TemporaryDirectory(prefix="ldp-speed-")
        path = Path(tmp.name) / "samples.txt"
        process = subprocess.Popen(
            [sys.executable, __file__, "--out", str(path), "--interval", str(interval),
             "--parent", str(os.getpid())],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        probe = cls(process, path, tmp)
        deadline = time.monotonic() + 10
        while not probe._samples() and time.monotonic() < deadline:
            time.sleep(interval)
        return probe

    def _samples(self) -> list[tuple[float, float]]:
        try:
            lines = self.path.read_text().splitlines()
        except FileNotFoundError:
            return []
        out = []
        for line in lines:
            parts = line.split()
            if len(parts) == 2:  # the last line may be half written
                out.append((float(parts[0]), float(parts[1])))
        return out

    def speed(self, t0: float, t1: float) -> float:
        """Mean CPU ms per unit over samples taken between monotonic times t0 and t1
        (the nearest sample's if the window holds none)."""
        samples = self._samples()
        if not samples:
            raise RuntimeError("the speed probe recorded nothing")
        inside = [ms for t, ms in samples if t0 <= t <= t1]
        if inside:
            return statistics.fmean(inside)
        return min(samples, key=lambda s: abs(s[0] - (t0 + t1) / 2))[1]

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)
        self._tmp.cleanup()

    def __enter__(self) -> Probe:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _main() -> None:
    ap = argparse.ArgumentParser(description="sample unit_ms() into a file")
    ap.add_argument("--out", required=True)
    ap.add_argument("--interval", type=float, default=0.05)
    ap.add_argument("--parent", type=int, default=0, help="exit when this process is gone")
    args = ap.parse_args()
    out_path = Path(args.out)
    with out_path.open("a", buffering=1) as out:
        while not args.parent or os.getppid() == args.parent:
            ms = unit_ms()
            out.write(f"{time.monotonic():.4f} {ms:.4f}\n")
            time.sleep(args.interval)
    # The parent died without ``stop``: nobody will clean its temporary folder up.
    out_path.unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        out_path.parent.rmdir()


if __name__ == "__main__":
    _main()
