"""Binary randomised response: Warner (1965) and the forced-response coin design.

Both report one bit; counter 1 counts the "yes" reports and the estimator
debiases the share of yes.  p* = P[yes | true yes], q* = P[yes | true no].
The two-level form is a permanent Warner bit at eps_inf, then a symmetric flip.
The one-bit helpers here (a flip step, its composition, a bit's epsilon) also
serve ``ldp_core.mechanisms.mean``.

>>> import random
>>> m = BinaryRR.from_p(0.7)
>>> round(m.epsilon, 4)           # ln(0.7 / 0.3)
0.8473
>>> m.randomize(1, rng=random.Random(0)) in (0, 1)
True
>>> round(ForcedResponse().epsilon, 6)   # two fair coins: ln 3
1.098612
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any, ClassVar

from ldp_core._rng import WORD, Rng, ratio_draws, words
from ldp_core.base import Design, IntReport, Kind, Mechanism, Report, check_index, need
from ldp_core.epsilon import check_mechanism_epsilon, check_separated, log_up, threshold_at_most
from ldp_core.mechanisms._two_level import TwoLevel

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = [
    "MECHANISMS",
    "BinaryRR",
    "ForcedResponse",
    "LongitudinalBinaryRR",
    "OneBit",
    "OneBitTwoLevel",
    "bit_epsilon",
    "exact_probability",
]


def exact_probability(p: object, name: str) -> Fraction:
    """``p`` as an exact fraction strictly inside (0, 1); 0.7 becomes 7/10."""
    ok = isinstance(p, int | float | Fraction) and not isinstance(p, bool)
    if ok and isinstance(p, float):
        ok = math.isfinite(p)
    exact = Fraction(repr(p)) if isinstance(p, float) and ok else Fraction(0)
    if ok and isinstance(p, int | Fraction):
        exact = Fraction(p)
    if not 0 < exact < 1:
        raise ValueError(f"{name} must be a probability in (0, 1), got {p!r}")
    return exact


def bit_epsilon(channel: tuple[Fraction, Fraction]) -> float:
    """eps of a one-bit channel: ln max(P[1|x]/P[1|x'], P[0|x']/P[0|x]), rounded up."""
    p, q = channel
    return max(log_up(p / q), log_up((1 - q) / (1 - p)))


class OneBit(IntReport):
    """Hooks of every one-bit report (two counters: counter 1 counts the 1s)."""

    decode_code: ClassVar[str] = "bit_out_of_range"

    @property
    def domain_size(self) -> int:
        return 2

    @property
    def num_counters(self) -> int:
        return 2

    @property
    def epsilon_actual(self) -> float:
        return bit_epsilon(self.channel)

    def _one_probabilities(self, values: npt.NDArray[Any]) -> npt.NDArray[np.float64]:
        """P[report = 1] for each value (binary: p* or q*)."""
        import numpy as np

        p, q = (float(x) for x in self.channel)
        return np.where(values.astype(np.int64) == 1, p, q)

    def simulate_tallies(
        self, values: npt.NDArray[Any], trials: int, gen: Any
    ) -> npt.NDArray[np.int64]:
        # One Bernoulli per report, grouped by distinct value: binomials, exactly.
        import numpy as np

        distinct, counts = np.unique(self._checked(values), return_counts=True)
        prob = self._one_probabilities(distinct)
        ones = np.zeros(trials, dtype=np.int64)
        for start in range(0, len(distinct), 4096):
            block = slice(start, start + 4096)
            draws = gen.binomial(counts[block], prob[block], size=(trials, len(prob[block])))
            ones += draws.sum(axis=1)
        out = np.empty((trials, 2), dtype=np.int64)
        out[:, 1] = ones
        out[:, 0] = len(values) - ones
        return out

    def _checked(self, values: npt.NDArray[Any]) -> npt.NDArray[Any]:
        return self._check_indices(values)

    def audit_design(self) -> Design:
        # E = {output = 1} for x = 1, x' = 0: ratio p*/q* (and 1 - E gives (1-q*)/(1-p*)).
        p, q = self.channel
        return Design(1, 0, lambda r: r == 1, lambda bits: bits, (p, q))


class _Binary(OneBit):
    kind: ClassVar[Kind] = "binary"

    def check_value(self, value: object) -> int:
        return check_index(value, 2)


@dataclass(frozen=True)
class BinaryRR(_Binary):
    """Warner's randomised response: report the true bit with probability ``keep``."""

    name: ClassVar[str] = "binary_rr"
    auto_candidate: ClassVar[bool] = True
    keep: Fraction
    declared: float

    def __post_init__(self) -> None:
        if not Fraction(1, 2) < self.keep < 1:
            raise ValueError(f"keep probability must be in (1/2, 1), got {self.keep}")

    @classmethod
    def create(cls, params: dict[str, Any]) -> BinaryRR:
        if params.get("p") is not None:
            return cls.from_p(params["p"])
        return cls.from_epsilon(need(params, "epsilon", cls.name))

    @classmethod
    def from_epsilon(cls, epsilon: float) -> BinaryRR:
        # eps = ln(p / (1-p))  <=>  p = e^eps / (1 + e^eps); the integer threshold
        # lies strictly below p, so ln(K / (W-K)) < eps.
        eps = check_mechanism_epsilon(epsilon)
        keep = Fraction(threshold_at_most(math.exp(eps) / (1 + math.exp(eps))), WORD)
        if keep <= Fraction(1, 2):
            check_separated(cls.name, eps, (keep, 1 - keep))
        return cls(keep=keep, declared=eps)

    @classmethod
    def from_p(cls, p: float | Fraction) -> BinaryRR:
        keep = exact_probability(p, "p")
        if keep <= Fraction(1, 2):
            raise ValueError(f"p must be in (1/2, 1), got {p!r}")
        return cls(keep=keep, declared=log_up(keep / (1 - keep)))

    @property
    def epsilon(self) -> float:
        return self.declared

    @property
    def channel(self) -> tuple[Fraction, Fraction]:
        return self.keep, 1 - self.keep

    def describe(self) -> dict[str, object]:
        # The exact keep probability keep_num / keep_den, for SDKs in other languages.
        return {**super().describe(), "keep_num": self.keep.numerator,
                "keep_den": self.keep.denominator}

    def _perturb(self, value: int | float, rng: Rng) -> int:
        flip = int(rng.randrange(self.keep.denominator) >= self.keep.numerator)
        return int(value) ^ flip

    def sample(self, values: npt.NDArray[Any], gen: Any) -> npt.NDArray[np.bool_]:
        flip = ~ratio_draws(self.keep.numerator, self.keep.denominator, len(values), gen)
        return flip ^ (values.astype("int64") == 1)  # type: ignore[no-any-return]


@dataclass(frozen=True)
class ForcedResponse(_Binary):
    """The coin design: with probability ``truth`` answer truthfully, else say
    "yes" with probability ``yes``.  Two fair coins: P[yes|yes] = 3/4,
    P[yes|no] = 1/4, eps = ln 3.
    """

    name: ClassVar[str] = "forced_response"
    truth: Fraction = Fraction(1, 2)
    yes: Fraction = Fraction(1, 2)

    def __post_init__(self) -> None:
        object.__setattr__(self, "truth", exact_probability(self.truth, "truth"))
        object.__setattr__(self, "yes", exact_probability(self.yes, "yes"))

    @classmethod
    def create(cls, params: dict[str, Any]) -> ForcedResponse:
        truth, yes = params.get("truth"), params.get("yes")
        if truth is not None or yes is not None or params.get("epsilon") is None:
            return cls(
                truth=Fraction(1, 2) if truth is None else exact_probability(truth, "truth"),
                yes=Fraction(1, 2) if yes is None else exact_probability(yes, "yes"),
            )
        return cls.from_epsilon(params["epsilon"])

    @classmethod
    def from_epsilon(cls, epsilon: float) -> ForcedResponse:
        # With yes = 1/2, eps = ln((1+t)/(1-t)), so t = (e^eps-1)/(e^eps+1),
        # taken as an integer threshold strictly below.
        eps = check_mechanism_epsilon(epsilon)
        try:
            t = threshold_at_most((math.exp(eps) - 1) / (math.exp(eps) + 1))
        except ValueError:
            check_separated(cls.name, eps, (Fraction(1, 2), Fraction(1, 2)))
            raise
        return cls(truth=Fraction(t, WORD), yes=Fraction(1, 2))

    @property
    def epsilon(self) -> float:
        # Computed from the design, never declared:
        # eps = ln max[(t + (1-t)y) / ((1-t)y), (t + (1-t)(1-y)) / ((1-t)(1-y))].
        return self.epsilon_actual

    @property
    def channel(self) -> tuple[Fraction, Fraction]:
        t, y = self.truth, self.yes
        return t + (1 - t) * y, (1 - t) * y

    def describe(self) -> dict[str, object]:
        # The exact coins truth_num / truth_den and yes_num / yes_den.
        return {**super().describe(), "truth_num": self.truth.numerator,
                "truth_den": self.truth.denominator, "yes_num": self.yes.numerator,
                "yes_den": self.yes.denominator}

    def _perturb(self, value: int | float, rng: Rng) -> int:
        honest = int(rng.randrange(self.truth.denominator) < self.truth.numerator)
        coin = int(rng.randrange(self.yes.denominator) < self.yes.numerator)
        return (honest & int(value)) | ((1 - honest) & coin)

    def sample(self, values: npt.NDArray[Any], gen: Any) -> npt.NDArray[np.bool_]:
        import numpy as np

        n = len(values)
        honest = ratio_draws(self.truth.numerator, self.truth.denominator, n, gen)
        coin = ratio_draws(self.yes.numerator, self.yes.denominator, n, gen)
        return np.where(honest, values.astype(np.int64) == 1, coin)


class OneBitTwoLevel(OneBit):
    """Two-level hooks of a one-bit mechanism: a permanent bit, then a symmetric flip.

    A bit with P[1] = p1 (true) or q1 (other), then kept with probability k:
    P[1] = k P1 + (1 - k)(1 - P1), and eps_1 = ln max(p*/q*, (1 - q*)/(1 - p*)).
    """

    keep: int

    @staticmethod
    def _compose(base: Mechanism, keep: int) -> tuple[Fraction, Fraction]:
        p1, q1 = base.channel
        k = Fraction(keep, WORD)
        return k * p1 + (1 - k) * (1 - p1), k * q1 + (1 - k) * (1 - q1)

    @staticmethod
    def _epsilon_of(base: Mechanism, channel: tuple[Fraction, Fraction]) -> float:
        return bit_epsilon(channel)

    @staticmethod
    def _lowest_keep(base: Mechanism) -> int:
        return WORD // 2

    def _instant(self, permanent: Report, rng: Rng) -> int:
        assert isinstance(permanent, int)
        return permanent ^ int(rng.getrandbits(32) >= self.keep)

    def _instant_batch(self, permanent: Any, gen: Any) -> Any:
        return permanent ^ (words(gen, len(permanent)) >= self.keep)


@dataclass(frozen=True)
class LongitudinalBinaryRR(OneBitTwoLevel, _Binary, TwoLevel[BinaryRR]):
    """Permanent Warner bit at eps_inf, then a symmetric flip (for boolean metrics)."""

    name: ClassVar[str] = "binary_rr"
    base_class: ClassVar[type[Mechanism]] = BinaryRR


MECHANISMS: tuple[type[Mechanism], ...] = (BinaryRR, ForcedResponse, LongitudinalBinaryRR)
