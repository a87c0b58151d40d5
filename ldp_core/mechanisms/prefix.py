"""Strings nobody listed: prefix levels, one OLH report each, discovery by FFT.

The device holds a string of at most L symbols (``_alphabet``: normalised,
then coded).  The levels are prefix lengths l_1 < ... < l_m = L (default every
second symbol: 2, 4, 6).  Each report belongs to ONE level, drawn on the
device from the CSPRNG with integer weights w_j (more to the last level: the
final estimates come from it), and carries an OLH report of the prefix of
length l_j: a public seed s uniform in [0, S) and y = GRR_g(h_s(x)), with

    x = (sym_0, ..., sym_{l_j - 1}) in GF(g)^{l_j}   (0 past the end; g >= B),
    h_s(x) = <a_{j,s}, x> mod g,

where the seed vectors a_{j,s} are uniform over GF(g)^{l_j}, drawn from
SHAKE-256 of (level, seed) by rejection (public, the same on every device).
The report is one integer, its own counter: (j S + s) g + y.  The collector
keeps m S g counters whatever n.

Channel.  p* = p = e^eps/(e^eps + g - 1) (the GRR threshold, strictly below);
for a uniform a and x != x', P[<a, x - x'> = 0] = 1/g exactly, so over the
draw of the family q* = p/g + (1 - 1/g)(1 - p)/(g - 1) = 1/g.  Epsilon is the
GRR's, whatever the level and seed: P[j, s, y | x] / P[j, s, y | x'] =
P[y | h(x)] / P[y | h(x')] <= p (g - 1)/(1 - p) = e^eps.  The unit: one report
per device per metric per epoch, eps per report.

Variance of a support count C(x) among n_j reports of level j, c of them x:

    Var = c p(1-p) + (n_j - c) q*(1-q*) + (p - q0)^2 (1/g)(1 - 1/g)/S * sum_{x' != x} c_x'^2

(q0 = (1-p)/(g-1); the last term is the finite family: x collides with x' on
a Binomial(S, 1/g)/S share of the seeds), and c_hat = (C - n_j/g)/(p - 1/g).

Discovery (``discover``, server side, numpy) lives in ``prefix_discovery``:
level by level from the counters alone, never from the reports.

>>> import random
>>> m = PrefixOLH(epsilon=4.0)
>>> m.cuts, m.g, m.num_counters
((2, 4, 6), 53, 325632)
>>> 0 <= m.randomize("Hello", rng=random.Random(0)) < m.num_counters
True
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Any, ClassVar

from ldp_core._rng import WORD, Rng
from ldp_core.base import Design, IntReport, Kind, Mechanism, Report
from ldp_core.epsilon import check_mechanism_epsilon, check_separated, log_up
from ldp_core.mechanisms._alphabet import Alphabet
from ldp_core.mechanisms._projective import is_prime
from ldp_core.mechanisms.grr import grr_keep_threshold, grr_step, grr_steps
from ldp_core.mechanisms.prefix_discovery import SURVIVORS, Discovered, Discovery, discover
from ldp_core.mechanisms.prefix_hash import (
    DEFAULT_SEEDS,
    choose_prime,
    default_cuts,
    default_shares,
    seed_vector,
    seed_vectors,
)

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = ["MECHANISMS", "Discovered", "Discovery", "PrefixOLH", "choose_prime", "seed_vectors"]


@dataclass(frozen=True)
class PrefixOLH(IntReport):
    """Prefix levels with an OLH report each; see the module docstring."""

    name: ClassVar[str] = "prefix_olh"
    kind: ClassVar[Kind] = "string"
    auto_candidate: ClassVar[bool] = True
    decode_code: ClassVar[str] = "bucket_out_of_range"
    declared_epsilon: float
    alphabet: Alphabet
    cuts: tuple[int, ...]
    shares: tuple[int, ...]
    g: int
    seeds: int
    keep: int = field(init=False)

    def __init__(
        self,
        epsilon: float,
        max_length: int = 6,
        alphabet: str = "a-z",
        casefold: bool = True,
        cuts: tuple[int, ...] | None = None,
        shares: tuple[int, ...] | None = None,
        seeds: int = DEFAULT_SEEDS,
        g: int | None = None,
    ) -> None:
        eps = check_mechanism_epsilon(epsilon)
        self._lay_out(eps, max_length, alphabet, casefold, cuts, shares, seeds, g)
        object.__setattr__(self, "declared_epsilon", eps)
        # p = e^eps/(e^eps + g - 1), threshold strictly below: p(g-1)/(1-p) < e^eps.
        object.__setattr__(self, "keep", grr_keep_threshold(eps, self.g))
        check_separated(self.name, eps, self.channel)

    def _lay_out(
        self,
        epsilon: float,
        max_length: int,
        alphabet: str,
        casefold: bool,
        cuts: tuple[int, ...] | None,
        shares: tuple[int, ...] | None,
        seeds: int,
        g: int | None,
    ) -> None:
        """Check and set alphabet, cuts, shares, seeds and the prime g (by default the
        one with the lowest variance at ``epsilon``)."""
        alpha = Alphabet.parse(alphabet, max_length, casefold)
        cuts = default_cuts(max_length) if cuts is None else tuple(cuts)
        if not cuts or list(cuts) != sorted(set(cuts)) or cuts[0] < 1 or cuts[-1] != max_length:
            raise ValueError(f"cuts must rise strictly to max_length {max_length}, got {cuts!r}")
        if max(b - a for a, b in zip((0, *cuts), cuts, strict=False)) > 2:
            raise ValueError(f"cuts must step by at most 2 symbols, got {cuts!r}")
        shares = default_shares(cuts) if shares is None else tuple(shares)
        if len(shares) != len(cuts) or any(
            isinstance(w, bool) or not isinstance(w, int) or w < 1 for w in shares
        ):
            raise ValueError(f"shares must be one positive integer per cut, got {shares!r}")
        if isinstance(seeds, bool) or not isinstance(seeds, int) or not 16 <= seeds <= 1 << 16:
            raise ValueError(f"seeds must be an integer in [16, 65536], got {seeds!r}")
        g = choose_prime(epsilon, alpha.base) if g is None else g
        if isinstance(g, bool) or not isinstance(g, int) or g < alpha.base or not is_prime(g):
            raise ValueError(f"g must be a prime >= the alphabet's {alpha.base} symbols, got {g!r}")
        object.__setattr__(self, "alphabet", alpha)
        object.__setattr__(self, "cuts", cuts)
        object.__setattr__(self, "shares", shares)
        object.__setattr__(self, "g", g)
        object.__setattr__(self, "seeds", seeds)

    @classmethod
    def create(cls, params: dict[str, Any]) -> Mechanism:
        from ldp_core.base import need

        extra = {k: params[k] for k in ("max_length", "alphabet", "casefold") if k in params}
        return cls(need(params, "epsilon", cls.name), **extra)

    # -- the channel ------------------------------------------------------------------

    @property
    def epsilon(self) -> float:
        return self.declared_epsilon

    @property
    def domain_size(self) -> int:
        return self.alphabet.size

    @property
    def channel(self) -> tuple[Fraction, Fraction]:
        return Fraction(self.keep, WORD), Fraction(1, self.g)

    @property
    def epsilon_actual(self) -> float:
        p = Fraction(self.keep, WORD)
        return log_up(p * (self.g - 1) / (1 - p))

    @property
    def num_counters(self) -> int:
        return len(self.cuts) * self.seeds * self.g

    @property
    def report_bits(self) -> float:
        return math.log2(self.num_counters)

    def check_value(self, value: object) -> int:
        if isinstance(value, str):
            return self.alphabet.code(value)
        return self.alphabet.check_code(value)

    def text(self, code: int) -> str:
        """The string of a code."""
        return self.alphabet.text(code)

    def describe(self) -> dict[str, object]:
        return {
            **super().describe(),
            "alphabet": self.alphabet.spec,
            "max_length": self.alphabet.max_length,
            "casefold": self.alphabet.casefold,
            "normalisation": "NFC" + (", casefold" if self.alphabet.casefold else ""),
            "cuts": list(self.cuts),
            "shares": list(self.shares),
            "g": self.g,
            "seeds": self.seeds,
        }

    # -- the device -------------------------------------------------------------------

    def bucket(self, level: int, seed: int, code: int) -> int:
        """h_{level, seed} of the prefix of ``code`` at that level."""
        length = self.cuts[level]
        a = seed_vector(level, seed, length, self.g)
        return sum(x * y for x, y in zip(a, self.alphabet.digits(code, length), strict=True)) % (
            self.g
        )

    def _perturb(self, value: int | float, rng: Rng) -> int:
        draw = rng.randrange(sum(self.shares))
        level = 0
        while draw >= self.shares[level]:
            draw -= self.shares[level]
            level += 1
        seed = rng.randrange(self.seeds)
        y = grr_step(self.bucket(level, seed, int(value)), self.keep, self.g, rng)
        return (level * self.seeds + seed) * self.g + y

    # -- server-side hooks ----------------------------------------------------------

    def _levels_of(self, n: int, gen: Any) -> npt.NDArray[np.int64]:
        import numpy as np

        edges = np.cumsum(self.shares)
        draws = gen.integers(0, int(edges[-1]), size=n)
        return np.searchsorted(edges, draws, side="right")  # type: ignore[no-any-return]

    def _hashes(self, level: int, seeds: Any, codes: Any) -> npt.NDArray[np.int64]:
        import numpy as np

        length = self.cuts[level]
        table = seed_vectors(level, self.seeds, length, self.g)
        powers = self.alphabet.base ** np.arange(length, dtype=np.int64)
        codes = np.asarray(codes, dtype=np.int64)
        digits = (codes[:, None] // powers[None, :]) % self.alphabet.base
        return (table[seeds] * digits).sum(axis=1) % self.g  # type: ignore[no-any-return]

    def sample(self, values: npt.NDArray[Any], gen: Any) -> npt.NDArray[np.int64]:
        import numpy as np

        codes = np.asarray(values, dtype=np.int64)
        levels = self._levels_of(len(codes), gen)
        seeds = gen.integers(0, self.seeds, size=len(codes))
        hashed = np.empty(len(codes), dtype=np.int64)
        for level in range(len(self.cuts)):
            mask = levels == level
            hashed[mask] = self._hashes(level, seeds[mask], codes[mask])
        y = grr_steps(hashed, self.keep, self.g, gen)
        return (levels * self.seeds + seeds) * self.g + y  # type: ignore[no-any-return]

    def simulate_tallies(
        self, values: npt.NDArray[Any], trials: int, gen: Any
    ) -> npt.NDArray[np.int64]:
        import numpy as np

        from ldp_core.base import CHUNK

        codes = np.asarray(values, dtype=np.int64)
        out = np.zeros((trials, self.num_counters), dtype=np.int64)
        for trial in range(trials):
            for start in range(0, len(codes), CHUNK):
                batch = self.sample(codes[start : start + CHUNK], gen)
                out[trial] += np.bincount(batch, minlength=self.num_counters)
        return out

    def simulate_counts(
        self, codes: npt.NDArray[np.int64], counts: npt.NDArray[np.int64], gen: Any
    ) -> npt.NDArray[np.int64]:
        """The tallies of ``counts[i]`` reports of ``codes[i]``, in bounded chunks: memory
        O(counters + distinct values + chunk), whatever the number of reports."""
        import numpy as np

        from ldp_core.base import CHUNK

        out = np.zeros(self.num_counters, dtype=np.int64)
        ends = np.cumsum(counts)
        total = int(ends[-1]) if len(ends) else 0
        for start in range(0, total, CHUNK):
            stop = min(total, start + CHUNK)
            first, last = np.searchsorted(ends, [start, stop - 1], side="right")
            runs = np.minimum(ends[first : last + 1], stop) - np.maximum(
                np.concatenate(([0], ends))[first : last + 1], start
            )
            batch = np.repeat(codes[first : last + 1], runs)
            out += np.bincount(self.sample(batch, gen), minlength=self.num_counters)
        return out

    def output_distribution(self, value: int) -> npt.NDArray[np.float64]:
        import numpy as np

        p = self.keep / WORD
        total = sum(self.shares)
        out = np.empty((len(self.cuts), self.seeds, self.g))
        for level, share in enumerate(self.shares):
            hashed = self._hashes(level, np.arange(self.seeds), np.full(self.seeds, value))
            block = np.full((self.seeds, self.g), (1 - p) / (self.g - 1))
            block[np.arange(self.seeds), hashed] = p
            out[level] = block * share / total / self.seeds
        flat = out.ravel()
        return np.asarray(flat / flat.sum(), dtype=np.float64)

    def _collisions(self, level: int, x: int, x_prime: int) -> int:
        return sum(
            self.bucket(level, s, x) == self.bucket(level, s, x_prime) for s in range(self.seeds)
        )

    def audit_design(self) -> Design:
        # E = {the report supports "a" and not "b"}: at level j the seed separates
        # them on S - k_j seeds, then the GRR decides: P[E | a] = sum_j w_j (1-k_j/S) p,
        # P[E | b] = sum_j w_j (1-k_j/S) (1-p)/(g-1); ratio p(g-1)/(1-p) = e^eps.
        import numpy as np

        x, x_prime = self.alphabet.code("a"), self.alphabet.code("b")
        p = Fraction(self.keep, WORD)
        total = sum(self.shares)
        apart = sum(
            Fraction(w, total) * Fraction(self.seeds - self._collisions(j, x, x_prime), self.seeds)
            for j, w in enumerate(self.shares)
        )
        g, s = self.g, self.seeds
        own = np.concatenate(
            [self._hashes(j, np.arange(s), np.full(s, x)) for j in range(len(self.cuts))]
        )
        other = np.concatenate(
            [self._hashes(j, np.arange(s), np.full(s, x_prime)) for j in range(len(self.cuts))]
        )

        def event(r: Report) -> bool:
            assert isinstance(r, int)
            row, y = divmod(r, g)
            return bool(own[row] == y and other[row] != y)

        def batch_event(batch: Any) -> Any:
            rows, y = np.divmod(batch, g)
            return (own[rows] == y) & (other[rows] != y)

        return Design(x, x_prime, event, batch_event, (apart * p, apart * (1 - p) / (g - 1)))

    # -- discovery (ldp_core.mechanisms.prefix_discovery) --------------------------------

    def support(
        self, level: int, block: npt.NDArray[np.int64], codes: npt.NDArray[np.int64]
    ) -> npt.NDArray[np.int64]:
        """C(x) = sum_s T[s, h_s(x)] at ``level`` for the prefixes of ``codes`` there."""
        import numpy as np

        length = self.cuts[level]
        table = seed_vectors(level, self.seeds, length, self.g)
        powers = self.alphabet.base ** np.arange(length, dtype=np.int64)
        digits = (np.asarray(codes, dtype=np.int64)[:, None] // powers) % self.alphabet.base
        hashed = (digits @ table.T) % self.g  # (K, S)
        return block[np.arange(self.seeds)[None, :], hashed].sum(axis=1)  # type: ignore[no-any-return]

    def variance_terms(self) -> tuple[float, float, float]:
        """(p, q*, family): Var[C] = c p(1-p) + (n-c) q*(1-q*) + family * sum c'^2."""
        p, q = self.keep / WORD, 1 / self.g
        q0 = (1 - p) / (self.g - 1)
        return p, q, (p - q0) ** 2 * q * (1 - q) / self.seeds

    def support_variance(self, c: Any, n_level: int, squares: float, epochs: int = 1) -> Any:
        """Var[C(x)] of a prefix held by c of a level's n_l reports (arrays welcome);
        one-level reports are independent, so ``epochs`` (of a window) changes nothing."""
        p, q, family = self.variance_terms()
        return c * p * (1 - p) + (n_level - c) * q * (1 - q) + family * squares

    def level_cluster(self, epochs: int) -> int:
        """How many reports of one device can share a level in a window of ``epochs``:
        1, each report draws its level afresh."""
        return 1

    def count_sd(self, c: float, n_level: int, squares: float, epochs: int = 1) -> float:
        """Standard deviation of c_hat for a prefix held by c of a level's n_l reports,
        the other values' counts squared summing to ``squares``."""
        p, q, _ = self.variance_terms()
        var = float(self.support_variance(c, n_level, squares, epochs))
        return math.sqrt(max(var, 0.0)) / (p - q)

    def discover(
        self,
        tallies: Any,
        confidence: float = 0.95,
        power: float = 0.95,
        survivors: int | tuple[int, ...] = SURVIVORS,
        top: int = 0,
        epochs: int = 1,
    ) -> Discovery:
        """The heavy strings of a tally vector (summed over ``epochs`` epochs with
        data): ``prefix_discovery.discover``."""
        return discover(self, tallies, confidence, power, survivors, top, epochs)


MECHANISMS: tuple[type[Mechanism], ...] = (PrefixOLH,)
