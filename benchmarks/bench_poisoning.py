"""Poisoning: what the maximal gain attack costs, and how often the signals see it.

Run: ``.venv/bin/python benchmarks/bench_poisoning.py [--quick]`` (about 30 s).

The issue's setting: d = 32, epsilon = 1, n = 10,000 honest reports in the
attacked epoch, 10 earlier honest epochs of the same population (Zipf(1) over
32 values; 70/30 for the binary designs), the rarest value (or "yes")
promoted by MGA fakes (``aggregator.attacks``), every signal of
``aggregator.poisoning`` at its default budgets.  The same experiments, with
pass/fail bands from the binomial law, are tests in
tests/aggregator/test_poisoning_detection.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from aggregator.attack_trials import Scenario, predicted_detection, run
from aggregator.attacks import fakes_needed, fraction_to_move, gain
from benchmarks._table import header, table
from ldp_core import Mechanism, mechanism
from ldp_core.registry import names_for

HONEST = 10_000
SHIFT = 0.10


def mechanisms() -> list[Mechanism]:
    """Every registered frequency mechanism at d = 32, eps = 1, and the binary ones."""
    out = [mechanism(name, epsilon=1.0, domain_size=32) for name in names_for("frequency")]
    for name in names_for("binary"):
        out.append(mechanism(name) if name == "forced_response" else mechanism(name, epsilon=1.0))
    return out


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def rows(quick: bool) -> list[tuple[object, ...]]:
    """One row per mechanism (see ``section`` for the columns)."""
    honest_trials, attack_trials = (400, 100) if quick else (4000, 1000)
    out: list[tuple[object, ...]] = []
    for i, m in enumerate(mechanisms()):
        plain, tokens = Scenario(m, honest=HONEST), Scenario(m, honest=HONEST, tokens=True)
        share = float(plain.shares()[plain.target])
        beta = fraction_to_move(m, SHIFT, share)
        at_beta = run(plain, beta, attack_trials, seed=100 + i)
        seed = 1000 * (i + 1)
        alarms = run(plain, 0.0, honest_trials, seed)
        at1 = run(plain, 0.01, attack_trials, seed + 1)
        at5 = run(plain, 0.05, attack_trials, seed + 2)
        tok5 = run(tokens, 0.05, attack_trials, seed + 3)
        two5 = run(plain, 0.05, attack_trials, seed + 4, epochs=2)
        out.append(
            (
                m.name,
                f"{gain(m):.2f}",
                _pct(beta),
                f"{fakes_needed(m, SHIFT, HONEST, share):,} reports, one key",
                f"{round(beta * HONEST):,} devices",
                f"{at_beta.mean_shift:+.3f}",
                _pct(at_beta.rate),
                _pct(at1.rate),
                _pct(at5.rate),
                _pct(predicted_detection(plain, 0.05)),
                _pct(tok5.rate),
                _pct(two5.rate),
                f"{_pct(alarms.rate)} ({alarms.detected}/{alarms.trials})",
            )
        )
    return out


def section(quick: bool) -> str:
    """The poisoning table as markdown."""
    columns = (
        "mechanism",
        "gain per fake",
        "fakes for +10 pts",
        "without tokens (n = 10,000)",
        "with tokens",
        "measured shift",
        "detected at +10 pts",
        "detected at 1%",
        "detected at 5%",
        "predicted at 5%",
        "at 5%, tokens",
        "at 5%, within 2 epochs",
        "false alarms (honest)",
    )
    return table(columns, rows(quick))


def main(argv: list[str]) -> None:
    quick = "--quick" in argv
    print(header("Poisoning: maximal gain attack against every mechanism (d = 32, eps = 1)"))
    print(section(quick))


if __name__ == "__main__":
    main(sys.argv[1:])
