"""The privacy audit: a measured lower bound on epsilon, beside the declared one.

For two neighbouring inputs x, x' the audit counts, over N reports of each, the
most powerful distinguishing event E of the mechanism:

=================  ====================================  =====================
mechanism          E                                     P[E|x] / P[E|x']
=================  ====================================  =====================
grr                output = x                            p*/q* = e^eps
sue, oue           bit x set and bit x' clear            p*(1-q*)/(q*(1-p*))
olh                report supports x and not x'          P (g-1)/(1-P)
olh, two levels    (s, h_s(x)), h_s(x') != h_s(x), in    R(N_min) = e^eps_1
                   a smallest bucket of the family
hadamard           output in C_x and not in C_x'         p*/(1-p*)
binary designs     output = 1   (x = 1, x' = 0)          p*/q*
one_bit_mean       output = 1   (x = hi, x' = lo)        p*/q*
piecewise          cell in hi's block (x = hi, x' = lo)  a/b (both levels)
hierarchical       the top-eps level's cells likelier    that level's p*/q*
                   under hi (x = hi, x' = lo)            (GRR or Hadamard)
prefix_olh         report supports "a" and not "b"       p (g-1)/(1-p)
prefix_olh, two    the same, the bucket's two GRR        p*/q*_g = e^eps_1
levels             steps composed (p*, q*_g)
=================  ====================================  =====================

Each mechanism states its own event (``Mechanism.audit_design``), for both of
its levels; this module only counts and bounds.

With one-sided Clopper-Pearson bounds (each at (1 - confidence)/4, so all four
hold together with probability >= confidence):

    eps_lb = max(0, ln(TPR_low / FPR_high), ln((1-FPR)_low / (1-TPR)_high))

which is <= the true epsilon with probability >= confidence.  A lower bound
above the declared epsilon is a *violation*: the mechanism is not as private
as it claims.  A lower bound well below it means the mechanism is noisier than
it claims (or the test too weak).  The *null control* runs the same test with
x' = x, whose true answer is 0.

Two sampling paths:

- the device path (default for anything not proven below): ``m.randomize``
  with a seeded ``random.Random``, so a bug in the randomiser is measured;
- the vectorised path (numpy, lazily): ``Mechanism.sample`` draws reports from
  the mechanism's own integer thresholds, level by level, exactly as
  ``_perturb`` compares them.  Only for the exact classes of ldp_core (a subclass that
  overrides the randomiser is never vectorised); the suite checks both paths
  agree with a two-sample test.

>>> from ldp_core import mechanism
>>> r = audit(mechanism("grr", epsilon=1.0, domain_size=4), trials=2000, seed=1,
...           vectorised=False)
>>> r.violation, r.lower_bound <= r.declared_epsilon, r.null_control
(False, True, 0.0)
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from ldp_core._rng import Rng
from ldp_core.base import CHUNK, Design, Mechanism
from ldp_core.capabilities import Memoisable
from ldp_core.clopper_pearson import beta_inc, cp_lower, cp_upper, epsilon_lower_bound
from ldp_core.registry import NAMES, classes, longitudinal, mechanism

if TYPE_CHECKING:
    pass

__all__ = [
    "AuditResult",
    "Design",
    "audit",
    "audit_all",
    "beta_inc",
    "cp_lower",
    "cp_upper",
    "design",
    "epsilon_lower_bound",
    "format_table",
    "sample_events",
]


# -- sampling: the device path and the vectorised path -----------------------------------


def design(m: Mechanism) -> Design:
    """The most powerful distinguishing test for ``m`` (its own ``audit_design``)."""
    return m.audit_design()


def _has_numpy() -> bool:
    try:
        import numpy  # noqa: F401
    except ImportError:
        return False
    return True


def vectorisable(m: Mechanism) -> bool:
    """Whether ``m``'s vectorised sampler is proven: exactly a registered class
    (a subclass that overrides the randomiser is never vectorised)."""
    return type(m) in classes()


def sample_events(
    m: Mechanism,
    value: int | float,
    trials: int,
    *,
    vectorised: bool,
    rng: Rng | None = None,
    gen: Any = None,
) -> int:
    """How many of ``trials`` reports of ``value`` fall in the design's event.

    Device path: ``m.randomize(value, rng)``, or for a two-level mechanism its
    memoised path under a fresh device secret per report (one report each).
    Vectorised path: ``m.sample`` with numpy ``gen`` (a ``numpy.random.Generator``).
    """
    d = design(m)
    if not vectorised:
        source = random.Random(0) if rng is None else rng
        if isinstance(m, Memoisable):
            return sum(
                d.event(m.randomize_memoised(value, _secret(source), "audit/1", source))
                for _ in range(trials)
            )
        return sum(d.event(m.randomize(value, source)) for _ in range(trials))
    if not vectorisable(m):
        raise ValueError(f"no proven vectorised sampler for {type(m).__name__}")
    import numpy as np

    generator = np.random.default_rng(0) if gen is None else gen
    total = 0
    for start in range(0, trials, CHUNK):
        values = np.full(min(CHUNK, trials - start), value)
        total += int(np.count_nonzero(d.batch_event(m.sample(values, generator))))
    return total


def _secret(source: Rng) -> bytes:
    return source.getrandbits(256).to_bytes(32, "little")


# -- the audit ---------------------------------------------------------------------------


@dataclass(frozen=True)
class AuditResult:
    """One audit: the declared epsilon beside the measured lower bound and null control."""

    mechanism: str
    levels: int
    domain_size: int
    declared_epsilon: float
    lower_bound: float
    null_control: float
    trials: int
    confidence: float
    path: str
    epsilon_inf: float | None = None

    #: The mechanism leaks more than it declares (lower bound > declared epsilon),
    #: at the stated confidence.  Computed, never passed.
    violation: bool = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "violation", self.lower_bound > self.declared_epsilon)

    def to_json(self) -> dict[str, object]:
        """The result as JSON-ready fields, with ``text`` for humans."""
        return {**asdict(self), "label": self.label, "text": self.text()}

    @property
    def label(self) -> str:
        name = self.mechanism if self.levels == 1 else f"{self.mechanism}/2-level"
        return f"{name} d={self.domain_size}"

    def text(self) -> str:
        """One line, e.g. for logs and the CLI."""
        verdict = "VIOLATION" if self.violation else "ok"
        inf = "" if self.epsilon_inf is None else f" (eps_inf={self.epsilon_inf:g})"
        return (
            f"{self.label}: declared eps={self.declared_epsilon:.4f}{inf}, "
            f"measured lower bound={self.lower_bound:.4f}, null control={self.null_control:.4f} "
            f"[{self.trials} trials, {100 * self.confidence:g}% CP, {self.path}] {verdict}"
        )

    def __str__(self) -> str:
        return self.text()


def audit(
    m: Mechanism,
    trials: int = 100_000,
    confidence: float = 0.999,
    *,
    seed: int = 0,
    rng: Rng | None = None,
    vectorised: bool | None = None,
) -> AuditResult:
    """Measure a lower bound on ``m``'s epsilon, with a null control.

    ``vectorised=None`` takes the vectorised path when it is proven for
    ``type(m)`` and numpy is present, else the device path (``rng`` or
    ``random.Random(seed)``); the device path of a two-level mechanism is its
    memoised path (fresh secret per report: one report each).
    """
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 1:
        raise ValueError(f"trials must be an integer >= 1, got {trials!r}")
    if vectorised is None:
        vectorised = vectorisable(m) and _has_numpy()
    d = design(m)
    gen: Any = None
    if vectorised:
        import numpy as np

        gen = np.random.default_rng(seed)
    source = random.Random(seed) if rng is None else rng

    def count(value: int | float) -> int:
        return sample_events(m, value, trials, vectorised=vectorised, rng=source, gen=gen)

    hits_x, hits_x_prime, hits_again = count(d.x), count(d.x_prime), count(d.x)
    memoised = isinstance(m, Memoisable)
    path = "vectorised" if vectorised else ("memoised device path" if memoised else "device path")
    return AuditResult(
        mechanism=m.name,
        levels=m.levels,
        domain_size=m.domain_size,
        declared_epsilon=m.epsilon,
        lower_bound=epsilon_lower_bound(hits_x, hits_x_prime, trials, confidence),
        null_control=epsilon_lower_bound(hits_x, hits_again, trials, confidence),
        trials=trials,
        confidence=confidence,
        path=path,
        epsilon_inf=getattr(m, "epsilon_inf", None),
    )


def audit_mechanisms(
    epsilon: float, domain_size: int = 8, lifetime_factor: float = 2.0
) -> list[Mechanism]:
    """Every registered mechanism at ``epsilon``: one-level, then two-level
    (eps_inf = factor * eps), each with the parameters its kind takes."""
    params: dict[str, Any] = {"domain_size": domain_size, "lo": 0.0, "hi": 1.0}
    one = [mechanism(name, epsilon=epsilon, **params) for name in NAMES if name != "auto"]
    two = [
        longitudinal(cls.name, epsilon=epsilon, epsilon_inf=lifetime_factor * epsilon, **params)
        for cls in classes(levels=2)
    ]
    return one + two


def audit_all(
    epsilons: Sequence[float] = (0.5, 1.0, 2.0),
    trials: int = 1_000_000,
    seed: int = 0,
    *,
    confidence: float = 0.999,
    domain_size: int = 8,
    vectorised: bool | None = None,
) -> list[AuditResult]:
    """Audit every mechanism (one- and two-level) at each epsilon, for ``ldp audit``."""
    results = []
    for i, eps in enumerate(epsilons):
        for j, m in enumerate(audit_mechanisms(eps, domain_size)):
            results.append(
                audit(
                    m,
                    trials,
                    confidence,
                    seed=seed * 1_000_003 + 1000 * i + j,
                    vectorised=vectorised,
                )
            )
    return results


def format_table(results: Sequence[AuditResult]) -> str:
    """A plain-text table of audits, one row each, and a verdict line."""
    width = max([24, *(len(r.label) for r in results)])
    header = (
        f"{'mechanism':<{width}} {'eps_inf':>7} {'declared':>9} {'lower bd':>9} "
        f"{'lb/decl':>7} {'null':>6} {'trials':>9}  verdict"
    )
    lines = [header, "-" * len(header)]
    for r in results:
        inf = "-" if r.epsilon_inf is None else f"{r.epsilon_inf:g}"
        lines.append(
            f"{r.label:<{width}} {inf:>7} {r.declared_epsilon:>9.4f} {r.lower_bound:>9.4f} "
            f"{r.lower_bound / r.declared_epsilon:>7.3f} {r.null_control:>6.3f} "
            f"{r.trials:>9}  {'VIOLATION' if r.violation else 'ok'}"
        )
    bad = sum(r.violation for r in results)
    conf = sorted({r.confidence for r in results})
    lines.append("-" * len(header))
    lines.append(
        f"{len(results)} audits, {bad} violations; each lower bound holds with probability "
        f">= {', '.join(f'{c:g}' for c in conf)} (Clopper-Pearson); null control: x' = x, truth 0"
    )
    return "\n".join(lines)
