"""Poisoning: what the maximal gain attack costs, and how often the signals see it.

Run: ``.venv/bin/python benchmarks/bench_poisoning.py [--quick] [--only grr,olh-2level]
[--trials SMALL,AT5,HONEST]``
(the default trials: hours of one core, most of it the Monte Carlo calibration of
the one-counter mechanisms, 0.1-0.2 s per estimate; ``--quick`` a tenth of the
trials; ``--trials`` sets them; ``--only`` splits the rows over processes).

The issue's setting: d = 32, epsilon = 1, n = 10,000 honest reports in the
attacked epoch, 30 earlier honest epochs of the same population (Zipf(1) over
32 values; 70/30 for the binary designs), the rarest value (or "yes")
promoted by MGA fakes (``aggregator.attacks``; for the two-level rows, at
eps_inf = 4, a memoised population: one permanent response per device, drawn
once and re-randomised in every epoch, and fakes crafted on the wire, no
memoisation), every signal of
``aggregator.poisoning`` at its default policy.  Every rate comes with its
trial count and a 95% Clopper-Pearson interval; false alarms are counted on
honest latest epochs, which the calibration never sees (it simulates from the
earlier epochs).  The same experiments, with pass/fail bands from the binomial
law, are tests in tests/aggregator/test_poisoning_detection.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scipy import stats

from aggregator.attack_trials import Outcome, Scenario, per_epoch_bound, predicted_detection, run
from aggregator.attacks import fakes_needed, fraction_to_move, gain
from aggregator.drift import mga_laws
from benchmarks._table import header, table
from ldp_core import Mechanism, longitudinal, mechanism
from ldp_core.registry import names_for

HONEST = 10_000
SHIFT = 0.10
#: The lifetime budget of the two-level rows (docs/privacy.md's longitudinal example).
EPS_INF = 4.0


def mechanisms() -> list[Mechanism]:
    """Every registered frequency mechanism at d = 32, eps = 1, and the binary ones; then
    their two-level forms at eps_inf = EPS_INF (appended: the one-level rows keep
    their seeds)."""
    out = [mechanism(name, epsilon=1.0, domain_size=32) for name in names_for("frequency")]
    for name in names_for("binary"):
        out.append(mechanism(name) if name == "forced_response" else mechanism(name, epsilon=1.0))
    out += [
        longitudinal(name, epsilon=1.0, epsilon_inf=EPS_INF, domain_size=32)
        for name in names_for("frequency", levels=2)
    ]
    out += [
        longitudinal(name, epsilon=1.0, epsilon_inf=EPS_INF)
        for name in names_for("binary", levels=2)
    ]
    return out


def tag(m: Mechanism) -> str:
    """The row's name (and ``--only``'s): the mechanism's, "-2level" for a two-level form."""
    return m.name if m.levels == 1 else f"{m.name}-2level"


def drift_test(m: Mechanism) -> str:
    """Which drift test runs by default (``aggregator.poisoning.assess``)."""
    memo = "memoised " if m.levels == 2 else ""
    return f"LR, {memo}Monte Carlo" if mga_laws(m) is not None else f"shares, {memo}Monte Carlo"


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def clopper_pearson(hits: int, trials: int, level: float = 0.95) -> tuple[float, float]:
    """The exact binomial interval of a rate.

    >>> [round(x, 4) for x in clopper_pearson(19, 2000)]
    [0.0057, 0.0148]
    """
    tail = (1 - level) / 2
    low = stats.beta.ppf(tail, hits, trials - hits + 1) if hits else 0.0
    high = stats.beta.ppf(1 - tail, hits + 1, trials - hits) if hits < trials else 1.0
    return float(low), float(high)


def _rate(o: Outcome) -> str:
    low, high = clopper_pearson(o.detected, o.trials)
    return f"{_pct(o.rate)} [{_pct(low)}, {_pct(high)}] ({o.detected}/{o.trials})"


def trials(m: Mechanism, quick: bool, given: tuple[int, int, int] | None = None) -> dict[str, int]:
    """Trials per cell (small cells, 5% fakes, honest): most where the goal is tight
    (Hadamard, HCMS at 5%); ``given`` overrides the three."""
    tight = m.name in ("hadamard", "hcms") and m.levels == 1
    out = {
        "small": 300,
        "at5": 2000 if tight else 1000,
        "honest": 2000 if mga_laws(m) is not None else 4000,
    }
    if given is not None:
        out = dict(zip(("small", "at5", "honest"), given, strict=True))
    return {k: max(20, v // 10) if quick else v for k, v in out.items()}


def rows(
    quick: bool, only: set[str] | None = None, given: tuple[int, int, int] | None = None
) -> list[tuple[object, ...]]:
    """One row per mechanism (see ``section`` for the columns)."""
    out: list[tuple[object, ...]] = []
    for i, m in enumerate(mechanisms()):
        if only and tag(m) not in only:
            continue
        count = trials(m, quick, given)
        plain, tokens = Scenario(m, honest=HONEST), Scenario(m, honest=HONEST, tokens=True)
        share = float(plain.shares()[plain.target])
        beta = fraction_to_move(m, SHIFT, share)
        at_beta = run(plain, beta, count["small"], seed=100 + i)
        seed = 1000 * (i + 1)
        alarms = run(plain, 0.0, count["honest"], seed)
        at1 = run(plain, 0.01, count["small"], seed + 1)
        at5 = run(plain, 0.05, count["at5"], seed + 2)
        tok5 = run(tokens, 0.05, count["small"], seed + 3)
        two5 = run(plain, 0.05, count["small"], seed + 4, epochs=2)
        out.append(
            (
                tag(m),
                f"{gain(m):.2f}",
                _pct(beta),
                f"{fakes_needed(m, SHIFT, HONEST, share):,} reports, one key",
                f"{round(beta * HONEST):,} devices",
                f"{at_beta.mean_shift:+.3f}",
                _pct(at_beta.rate),
                _pct(at1.rate),
                _rate(at5),
                _pct(predicted_detection(plain, 0.05)),
                _pct(tok5.rate),
                _pct(two5.rate),
                _rate(alarms),
                drift_test(m),
            )
        )
        # Each row as it is done (the full run is long): stderr, one markdown line.
        print("| " + " | ".join(str(c) for c in out[-1]) + " |", file=sys.stderr, flush=True)
    return out


def bounds() -> str:
    """The best any per-epoch test can do at 5% fakes, 1% of false alarms (normal law)."""
    out: list[tuple[object, ...]] = []
    for name in ("hadamard", "hcms"):
        m = mechanism(name, epsilon=1.0, domain_size=32)
        plain, tokens = Scenario(m, honest=HONEST), Scenario(m, honest=HONEST, tokens=True)
        cells: list[object] = [name]
        for s in (plain, tokens):
            cells += [_pct(per_epoch_bound(s, 0.05, 0.01, history=h)) for h in (10, 30, 60)]
            cells.append(_pct(per_epoch_bound(s, 0.05, 0.01)))
        out.append(tuple(cells))
    columns = ["mechanism"] + [
        f"{label}, {h}"
        for label in ("5% of reports", "tokens: 5% of devices")
        for h in ("10 earlier epochs", "30", "60", "law known")
    ]
    return table(tuple(columns), out)


def section(
    quick: bool, only: set[str] | None = None, given: tuple[int, int, int] | None = None
) -> str:
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
        "detected at 5% [95% CI] (trials)",
        "predicted at 5%",
        "at 5%, tokens",
        "at 5%, within 2 epochs",
        "false alarms (honest) [95% CI] (trials)",
        "drift test",
    )
    return table(columns, rows(quick, only, given))


def main(argv: list[str]) -> None:
    quick = "--quick" in argv
    only = set(argv[argv.index("--only") + 1].split(",")) if "--only" in argv else None
    given = None
    if "--trials" in argv:  # small,at5,honest
        a, b, c = (int(x) for x in argv[argv.index("--trials") + 1].split(","))
        given = (a, b, c)
    print(header("Poisoning: maximal gain attack against every mechanism (d = 32, eps = 1)"))
    print(section(quick, only, given))
    print()
    print("Best power of any per-epoch test at 5% fakes and 1% false alarms:")
    print(bounds())


if __name__ == "__main__":
    main(sys.argv[1:])
