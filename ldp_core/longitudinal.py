"""Two-level (longitudinal, memoised) mechanisms: RAPPOR's design for every family.

A device that reports the same value every day under a one-level mechanism
leaks it: its reports average to the true value.  A two-level mechanism first
draws a *permanent* response B' from the value at the lifetime budget
``epsilon_inf`` and memoises it per (metric, version, value); every report is
then a fresh *instantaneous* randomisation of B'.  Any number of reports is a
post-processing of B', so their total leak is at most ``epsilon_inf`` per
distinct value; one report alone is ``epsilon`` = eps_1 < eps_inf.

The permanent response is not stored: it is a deterministic function of a
device secret, the context (metric and version) and the value, drawn from an
HMAC_DRBG (NIST SP 800-90A, SHA-256) seeded with
HMAC-SHA256(secret, label | context | value).  It survives restarts, needs no
table of true values, and is never redrawn.

The composed channel (p*, q*) is exact, so the generic estimator applies as is:

    p* = p1 p2 + (1 - p1) q2,      q* = q1 p2 + (1 - q1) q2

with (p1, q1) the permanent channel and (p2, q2) the instantaneous one.  The
instantaneous keep threshold K (P[keep] = K / 2**32) is the largest integer for
which the outward-rounded eps_1 is <= the requested epsilon, found by bisection
(eps_1 grows with K: a lower K is a garbling of a higher one).

>>> import random
>>> m = longitudinal("oue", epsilon=1.0, epsilon_inf=4.0, domain_size=8)
>>> m.name, m.levels, m.epsilon <= 1.0, m.epsilon_inf
('oue', 2, True, 4.0)
>>> secret = bytes(32)
>>> a = m.permanent_response(3, secret, "app.theme/v1")
>>> a == m.permanent_response(3, secret, "app.theme/v1")      # memoised, not stored
True
>>> r = m.randomize_memoised(3, secret, "app.theme/v1", rng=random.Random(0))
>>> m.decode(m.encode(r)) == r
True
"""

from __future__ import annotations

import hashlib
import hmac
from abc import abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, ClassVar, Generic, TypeVar

from ldp_core._rng import WORD, Rng, resolve, uniform_words
from ldp_core.base import Family, Kind, Mechanism, Payload, Report, check_domain_size
from ldp_core.binary import BinaryRR
from ldp_core.epsilon import check_epsilon, log_up
from ldp_core.grr import GRR
from ldp_core.mean import OneBitMean
from ldp_core.olh import OLH, choose_g
from ldp_core.registry import auto_choice
from ldp_core.unary import OUE, SUE, UnaryEncoding

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = [
    "HmacDrbg",
    "LongitudinalBinaryRR",
    "LongitudinalGRR",
    "LongitudinalOLH",
    "LongitudinalOUE",
    "LongitudinalOneBitMean",
    "LongitudinalSUE",
    "TwoLevel",
    "longitudinal",
    "permanent_seed",
]

#: Domain separation of the permanent-response derivation.  Never change it:
#: a new label would redraw every device's permanent responses.
LABEL = b"ldp-telemetry/permanent/v1"
#: The shortest device secret accepted, in bytes.
MIN_SECRET_BYTES = 16


# -- deterministic generator for the permanent level --------------------------------


class HmacDrbg:
    """HMAC_DRBG with SHA-256 (NIST SP 800-90A, no reseed): exact integers.

    Checked against the NIST CAVP vectors (tests/test_longitudinal.py).

    Satisfies ``Rng``, so a mechanism's own ``_perturb`` (integer thresholds)
    draws the permanent response from it unchanged.

    >>> HmacDrbg(b"seed").getrandbits(32) == HmacDrbg(b"seed").getrandbits(32)
    True
    """

    def __init__(self, seed_material: bytes) -> None:
        self._key = b"\x00" * 32
        self._v = b"\x01" * 32
        self._update(seed_material)

    def _mac(self, key: bytes, data: bytes) -> bytes:
        return hmac.new(key, data, hashlib.sha256).digest()

    def _update(self, data: bytes | None) -> None:
        self._key = self._mac(self._key, self._v + b"\x00" + (data or b""))
        self._v = self._mac(self._key, self._v)
        if data:
            self._key = self._mac(self._key, self._v + b"\x01" + data)
            self._v = self._mac(self._key, self._v)

    def generate(self, count: int) -> bytes:
        """``count`` pseudo-random bytes (one HMAC_DRBG generate call)."""
        out = bytearray()
        while len(out) < count:
            self._v = self._mac(self._key, self._v)
            out += self._v
        self._update(None)
        return bytes(out[:count])

    def getrandbits(self, k: int, /) -> int:
        """A uniform integer in [0, 2**k)."""
        if k < 0:
            raise ValueError("number of bits must be non-negative")
        if k == 0:
            return 0
        nbytes = (k + 7) // 8
        return int.from_bytes(self.generate(nbytes), "little") >> (8 * nbytes - k)

    def randrange(self, start: int, stop: int | None = None, step: int = 1) -> int:
        """A uniform integer in range(start, stop), exactly (rejection sampling)."""
        if stop is None:
            start, stop = 0, start
        if step != 1:
            raise ValueError("HmacDrbg.randrange supports step=1 only")
        width = stop - start
        if width <= 0:
            raise ValueError(f"empty range for randrange({start}, {stop})")
        bits = width.bit_length()
        while True:
            r = self.getrandbits(bits)
            if r < width:
                return start + r


def permanent_seed(secret: bytes, context: str, value: int | float) -> bytes:
    """HMAC-SHA256(secret, LABEL | context | value): the permanent level's seed.

    ``value`` is canonical (``check_value``'s output): ints as decimal text,
    floats as their exact hex form.
    """
    if not isinstance(secret, bytes | bytearray) or len(secret) < MIN_SECRET_BYTES:
        raise ValueError(f"secret must be at least {MIN_SECRET_BYTES} bytes")
    if not isinstance(context, str):
        raise ValueError(f"context must be a string such as 'metric/version', got {context!r}")
    text = f"f:{value.hex()}" if isinstance(value, float) else f"i:{int(value)}"
    message = LABEL + b"\x00" + context.encode("utf-8") + b"\x00" + text.encode("ascii")
    return hmac.new(bytes(secret), message, hashlib.sha256).digest()


# -- the shared shape ----------------------------------------------------------------

B = TypeVar("B", bound=Mechanism)


@dataclass(frozen=True)
class TwoLevel(Mechanism, Generic[B]):
    """A permanent level ``base`` (at ``epsilon_inf``) then an instantaneous one.

    ``keep`` is the instantaneous threshold: the permanent response is kept with
    probability keep / 2**32.  Tally layout, wire form and values are the base's.
    """

    levels: ClassVar[int] = 2
    base: B
    declared_epsilon: float
    epsilon_inf: float
    keep: int
    _eps_1: float = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Built by ``longitudinal``; checked again here so no hand-built object can
        # claim less than its levels implement.
        if not self._lowest_keep(self.base) < self.keep < WORD:
            raise ValueError(f"instantaneous keep threshold {self.keep} out of range")
        if not self.base.epsilon_actual <= self.epsilon_inf:
            raise ValueError(
                f"epsilon_inf {self.epsilon_inf} is below the permanent level's "
                f"{self.base.epsilon_actual}"
            )
        eps_1 = self._epsilon_of(self.base, self._compose(self.base, self.keep))
        if not eps_1 <= self.declared_epsilon < self.epsilon_inf:
            raise ValueError(
                f"one report costs {eps_1}: above the declared epsilon {self.declared_epsilon} "
                f"or not below epsilon_inf {self.epsilon_inf}"
            )
        object.__setattr__(self, "_eps_1", eps_1)

    # -- what each design defines ------------------------------------------------

    @staticmethod
    @abstractmethod
    def _compose(base: B, keep: int) -> tuple[Fraction, Fraction]:
        """The exact one-report channel for an instantaneous threshold ``keep``."""

    @staticmethod
    @abstractmethod
    def _epsilon_of(base: B, channel: tuple[Fraction, Fraction]) -> float:
        """eps_1 of a composed channel, rounded up."""

    @staticmethod
    @abstractmethod
    def _lowest_keep(base: B) -> int:
        """The threshold at which the instantaneous level erases everything."""

    @abstractmethod
    def _instant(self, permanent: Report, rng: Rng) -> Report:
        """The instantaneous randomisation of a permanent response."""

    # -- construction ----------------------------------------------------------------

    @classmethod
    def solve_keep(cls, base: B, epsilon: float) -> int:
        """The largest K with eps_1(K) <= epsilon, by bisection on the integer K."""

        def ok(k: int) -> bool:
            return cls._epsilon_of(base, cls._compose(base, k)) <= epsilon

        lo, hi = cls._lowest_keep(base), WORD - 1  # eps_1(lo) = 0: always ok
        if ok(hi):
            return hi
        while hi - lo > 1:  # invariant: ok(lo), not ok(hi)
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if ok(mid) else (lo, mid)
        if lo == cls._lowest_keep(base):
            raise ValueError(f"epsilon {epsilon} is too small for a two-level {base.name}")
        return lo

    # -- Mechanism -------------------------------------------------------------------

    @property
    def instantaneous_keep(self) -> Fraction:
        """P[the instantaneous level keeps the permanent response (bit)]."""
        return Fraction(self.keep, WORD)

    @property
    def permanent(self) -> B:
        """The permanent level: what infinitely many reports of one value reveal."""
        return self.base

    @property
    def epsilon(self) -> float:
        """eps_1: one report, from the exact composed channel, rounded up."""
        return self.epsilon_actual

    @property
    def epsilon_actual(self) -> float:
        return self._eps_1

    @property
    def channel(self) -> tuple[Fraction, Fraction]:
        return self._compose(self.base, self.keep)

    @property
    def domain_size(self) -> int:
        return self.base.domain_size

    @property
    def num_counters(self) -> int:
        return self.base.num_counters

    @property
    def report_bits(self) -> float:
        return self.base.report_bits

    def counters(self, report: Report) -> tuple[int, ...]:
        return self.base.counters(report)

    def encode(self, report: Report) -> Payload:
        return self.base.encode(report)

    def decode(self, payload: object) -> Report:
        return self.base.decode(payload)

    def check_value(self, value: object) -> int | float:
        return self.base.check_value(value)

    def support_counts(self, tallies: Sequence[int] | npt.NDArray[np.int64]) -> list[int]:
        return self.base.support_counts(tallies)

    def _perturb(self, value: int | float, rng: Rng) -> Report:
        # No memo: a fresh permanent response, then the instantaneous level.
        return self._instant(self.base._perturb(value, rng), rng)

    def permanent_response(self, value: object, secret: bytes, context: str) -> Report:
        """B' for ``value``: a deterministic function of (secret, context, value)."""
        v = self.check_value(value)
        return self.base._perturb(v, HmacDrbg(permanent_seed(secret, context, v)))

    def randomize_memoised(
        self, value: object, secret: bytes, context: str, rng: Rng | None = None
    ) -> Report:
        """The device path with memoisation: B' (memoised) then a fresh instantaneous draw.

        ``context`` names the metric and its version, e.g. ``"app.theme/v3"``.
        """
        return self._instant(self.permanent_response(value, secret, context), resolve(rng))

    def describe(self) -> dict[str, object]:
        out = super().describe()
        out.update(
            levels=2,
            epsilon_requested=self.declared_epsilon,
            epsilon_inf=self.epsilon_inf,
            epsilon_inf_actual=self.base.epsilon_actual,
            instantaneous_keep=float(self.instantaneous_keep),
        )
        return out

    def unit_text(self) -> str:
        """The two units of privacy this mechanism states."""
        return (
            f"eps_1={self.epsilon:.4g} per device, per metric, per report; "
            f"eps_inf={self.epsilon_inf:.4g} per device, per metric, per distinct value, lifetime"
        )


def _grr_step(value: int, keep: int, size: int, rng: Rng) -> int:
    """GRR over ``size`` symbols: keep with probability keep/2**32, else uniform other."""
    # Draw both numbers whatever happens, so the work does not depend on the value.
    kept = int(rng.getrandbits(32) < keep)
    other = (value + 1 + rng.randrange(size - 1)) % size
    return kept * value + (1 - kept) * other


def _flip_step(bit: int, keep: int, rng: Rng) -> int:
    """Keep a bit with probability keep/2**32, else flip it."""
    return bit ^ int(rng.getrandbits(32) >= keep)


def _grr_compose(p1: Fraction, size: int, keep: int) -> tuple[Fraction, Fraction]:
    # GRR then GRR over the same ``size`` symbols is a GRR:
    #   p* = p1 p2 + (1 - p1) q2     (kept twice, or moved away and back),
    #   q* = q1 p2 + (1 - q1) q2,    q_i = (1 - p_i)/(size - 1).
    q1 = (1 - p1) / (size - 1)
    p2 = Fraction(keep, WORD)
    q2 = (1 - p2) / (size - 1)
    return p1 * p2 + (1 - p1) * q2, q1 * p2 + (1 - q1) * q2


def _flip_compose(p1: Fraction, q1: Fraction, keep: int) -> tuple[Fraction, Fraction]:
    # A bit with P[1] = p1 (true) or q1 (other), then a symmetric flip keeping
    # with k: P[1] = k P1 + (1 - k)(1 - P1).
    k = Fraction(keep, WORD)
    return k * p1 + (1 - k) * (1 - p1), k * q1 + (1 - k) * (1 - q1)


def _bit_epsilon(channel: tuple[Fraction, Fraction]) -> float:
    # One bit: eps_1 = ln max(P[1|x]/P[1|x'], P[0|x']/P[0|x]).
    p, q = channel
    return max(log_up(p / q), log_up((1 - q) / (1 - p)))


# -- GRR ------------------------------------------------------------------------------


@dataclass(frozen=True)
class LongitudinalGRR(TwoLevel[GRR]):
    """Permanent GRR(eps_inf) over d, then an instantaneous GRR over d.

    eps_1: the composition is itself a GRR (p*, q*) with p* + (d-1) q* = 1, so
    every output y has P[y|v]/P[y|v'] in {p*/q*, q*/p*, 1}: eps_1 = ln(p*/q*).
    """

    name: ClassVar[str] = "grr"
    kind: ClassVar[Kind] = "frequency"
    family: ClassVar[Family] = "direct"

    @staticmethod
    def _compose(base: GRR, keep: int) -> tuple[Fraction, Fraction]:
        return _grr_compose(Fraction(base.keep, WORD), base.size, keep)

    @staticmethod
    def _epsilon_of(base: GRR, channel: tuple[Fraction, Fraction]) -> float:
        return log_up(channel[0] / channel[1])

    @staticmethod
    def _lowest_keep(base: GRR) -> int:
        return -(-WORD // base.size)

    def _instant(self, permanent: Report, rng: Rng) -> int:
        assert isinstance(permanent, int)
        return _grr_step(permanent, self.keep, self.base.size, rng)


# -- unary (RAPPOR: PRR then IRR) -------------------------------------------------------


@dataclass(frozen=True)
class _LongitudinalUnary(TwoLevel[UnaryEncoding]):
    """Permanent unary encoding (RAPPOR's PRR) per bit, then per-bit flips (IRR).

    IRR: P[S_i = 1 | B'_i = 1] = p2 = k, P[S_i = 1 | B'_i = 0] = q2 = 1 - k.
    Bits stay independent given the value, so one report is a unary encoding
    with the composed (p*, q*), and two values differ in two bits:
        eps_1 = ln[ p* (1 - q*) / ((1 - p*) q*) ].
    """

    kind: ClassVar[Kind] = "frequency"
    family: ClassVar[Family] = "unary"

    @staticmethod
    def _compose(base: UnaryEncoding, keep: int) -> tuple[Fraction, Fraction]:
        p1, q1 = base.channel
        return _flip_compose(p1, q1, keep)

    @staticmethod
    def _epsilon_of(base: UnaryEncoding, channel: tuple[Fraction, Fraction]) -> float:
        p, q = channel
        return log_up(p * (1 - q) / ((1 - p) * q))

    @staticmethod
    def _lowest_keep(base: UnaryEncoding) -> int:
        return WORD // 2

    def _instant(self, permanent: Report, rng: Rng) -> tuple[int, ...]:
        assert isinstance(permanent, tuple)
        # One uniform word per bit: bit i is B'_i when its word is < keep, else flipped.
        ones = set(permanent)
        keep = self.keep
        words = uniform_words(self.base.size, rng)
        return tuple(i for i, u in enumerate(words) if (i in ones) == (u < keep))


@dataclass(frozen=True)
class LongitudinalSUE(_LongitudinalUnary):
    """Basic RAPPOR: SUE(eps_inf) as the PRR, then a symmetric IRR."""

    name: ClassVar[str] = "sue"


@dataclass(frozen=True)
class LongitudinalOUE(_LongitudinalUnary):
    """OUE(eps_inf) as the PRR, then a symmetric IRR."""

    name: ClassVar[str] = "oue"


# -- OLH --------------------------------------------------------------------------------


@dataclass(frozen=True)
class LongitudinalOLH(TwoLevel[OLH]):
    """Permanent (seed, GRR_g(h_seed(v))) at eps_inf, then GRR over g on the bucket.

    The seed is part of the permanent response and kept.  The bucket passes two
    GRRs over g, i.e. one GRR with keep P = p1 p2 + (1 - p1)(1 - p2)/(g - 1),
    so one report is an OLH report with bucket keep P (same hash family):
        p* = P, q* = c P + (1 - c)(1 - P)/(g - 1),
        eps_1 = ln[ P (g - 1) / (1 - P) ]   (the bucket GRR's epsilon).
    """

    name: ClassVar[str] = "olh"
    kind: ClassVar[Kind] = "frequency"
    family: ClassVar[Family] = "hashed"

    @staticmethod
    def _bucket_keep(base: OLH, keep: int) -> Fraction:
        return _grr_compose(base.bucket_keep, base.g, keep)[0]

    @staticmethod
    def _compose(base: OLH, keep: int) -> tuple[Fraction, Fraction]:
        c, p = base.collision, LongitudinalOLH._bucket_keep(base, keep)
        return p, c * p + (1 - c) * (1 - p) / (base.g - 1)

    @staticmethod
    def _epsilon_of(base: OLH, channel: tuple[Fraction, Fraction]) -> float:
        p = channel[0]
        return log_up(p * (base.g - 1) / (1 - p))

    @staticmethod
    def _lowest_keep(base: OLH) -> int:
        return -(-WORD // base.g)

    @property
    def hashing(self) -> OLH:
        """The hash family (seeds, g, h_s), shared with the permanent level."""
        return self.base

    @property
    def bucket_keep(self) -> Fraction:
        """P[reported bucket = true bucket], over both levels."""
        return self._bucket_keep(self.base, self.keep)

    @property
    def g(self) -> int:
        return self.base.g

    @property
    def num_seeds(self) -> int:
        return self.base.num_seeds

    @property
    def collision(self) -> Fraction:
        return self.base.collision

    def bucket(self, seed: int, value: int) -> int:
        """h_seed(value)."""
        return self.base.bucket(seed, value)

    def _instant(self, permanent: Report, rng: Rng) -> tuple[int, int]:
        assert isinstance(permanent, tuple)
        seed, bucket = permanent
        return seed, _grr_step(bucket, self.keep, self.base.g, rng)


# -- one bit: 1BitMean and binary RR ----------------------------------------------------------


@dataclass(frozen=True)
class LongitudinalOneBitMean(TwoLevel[OneBitMean]):
    """Permanent 1BitMean bit at eps_inf, then a symmetric flip keeping with k.

    P[1 | x] = k P1(x) + (1 - k)(1 - P1(x)) is still linear in z = (x-lo)/(hi-lo),
    between q* (x = lo) and p* (x = hi), so the mean estimator applies, and
    eps_1 = ln max(p*/q*, (1 - q*)/(1 - p*)) (the extremes bound every x).
    Memoisation is per distinct value: a numeric metric whose value keeps
    changing spends eps_inf on each new value.
    """

    name: ClassVar[str] = "one_bit_mean"
    kind: ClassVar[Kind] = "mean"
    family: ClassVar[Family] = "mean"

    @staticmethod
    def _compose(base: OneBitMean, keep: int) -> tuple[Fraction, Fraction]:
        p1, q1 = base.channel
        return _flip_compose(p1, q1, keep)

    @staticmethod
    def _epsilon_of(base: OneBitMean, channel: tuple[Fraction, Fraction]) -> float:
        return _bit_epsilon(channel)

    @staticmethod
    def _lowest_keep(base: OneBitMean) -> int:
        return WORD // 2

    @property
    def lo(self) -> float:
        return self.base.lo

    @property
    def hi(self) -> float:
        return self.base.hi

    def scaled(self, value: float) -> Fraction:
        """z = (value - lo)/(hi - lo), exactly."""
        return self.base.scaled(value)

    def one_probability(self, value: float) -> Fraction:
        """P[report = 1 | value] over both levels, exactly."""
        k = self.instantaneous_keep
        return (1 - k) + (2 * k - 1) * self.base.one_probability(value)

    def _instant(self, permanent: Report, rng: Rng) -> int:
        assert isinstance(permanent, int)
        return _flip_step(permanent, self.keep, rng)


@dataclass(frozen=True)
class LongitudinalBinaryRR(TwoLevel[BinaryRR]):
    """Permanent Warner bit at eps_inf, then a symmetric flip (for boolean metrics).

    eps_1 = ln max(p*/q*, (1 - q*)/(1 - p*)) of the composed one-bit channel.
    """

    name: ClassVar[str] = "binary_rr"
    kind: ClassVar[Kind] = "binary"
    family: ClassVar[Family] = "binary"

    @staticmethod
    def _compose(base: BinaryRR, keep: int) -> tuple[Fraction, Fraction]:
        p1, q1 = base.channel
        return _flip_compose(p1, q1, keep)

    @staticmethod
    def _epsilon_of(base: BinaryRR, channel: tuple[Fraction, Fraction]) -> float:
        return _bit_epsilon(channel)

    @staticmethod
    def _lowest_keep(base: BinaryRR) -> int:
        return WORD // 2

    def _instant(self, permanent: Report, rng: Rng) -> int:
        assert isinstance(permanent, int)
        return _flip_step(permanent, self.keep, rng)


# -- the registry of two-level designs ------------------------------------------------


def _build(cls: type[TwoLevel[B]], base: B, epsilon: float, epsilon_inf: float) -> TwoLevel[B]:
    return cls(
        base=base,
        declared_epsilon=epsilon,
        epsilon_inf=epsilon_inf,
        keep=cls.solve_keep(base, epsilon),
    )


def longitudinal(
    name: str,
    *,
    epsilon: float,
    epsilon_inf: float,
    domain_size: int | None = None,
    lo: float | None = None,
    hi: float | None = None,
) -> Mechanism:
    """A two-level mechanism: eps_1 <= ``epsilon`` per report, ``epsilon_inf`` per value.

    ``name``: grr, sue, oue, olh, auto (``domain_size=``); one_bit_mean
    (``lo=``, ``hi=``); binary_rr.  ``auto`` resolves with ``auto_choice`` at
    ``epsilon`` (to one_bit_mean when ``lo`` and ``hi`` are given).  Every bad
    parameter is a ValueError naming it.
    """
    eps = check_epsilon(epsilon)
    eps_inf = check_epsilon(epsilon_inf, "epsilon_inf")
    if not eps < eps_inf:
        raise ValueError(
            f"epsilon {eps} must be below epsilon_inf {eps_inf} "
            "(one report cannot cost more than the lifetime bound)"
        )
    if name == "auto" and lo is not None and hi is not None:
        name = "one_bit_mean"  # a numeric metric: the only mean mechanism
    if name == "one_bit_mean":
        if lo is None or hi is None:
            raise ValueError("two-level 'one_bit_mean' needs lo= and hi=")
        return _build(LongitudinalOneBitMean, OneBitMean(eps_inf, lo, hi), eps, eps_inf)
    if name == "binary_rr":
        return _build(LongitudinalBinaryRR, BinaryRR.from_epsilon(eps_inf), eps, eps_inf)
    if name not in ("grr", "sue", "oue", "olh", "auto"):
        raise ValueError(
            f"no two-level version of mechanism {name!r}; "
            "known: grr, sue, oue, olh, one_bit_mean, binary_rr, auto"
        )
    if domain_size is None:
        raise ValueError(f"two-level {name!r} needs domain_size=")
    d = check_domain_size(domain_size)
    if name == "auto":
        name = auto_choice(eps, d).chosen
    builders: dict[str, Callable[[], TwoLevel[GRR] | TwoLevel[UnaryEncoding] | TwoLevel[OLH]]] = {
        "grr": lambda: _build(LongitudinalGRR, GRR(eps_inf, d), eps, eps_inf),
        "sue": lambda: _build(LongitudinalSUE, SUE(eps_inf, d), eps, eps_inf),
        "oue": lambda: _build(LongitudinalOUE, OUE(eps_inf, d), eps, eps_inf),
        # g is chosen for the per-report epsilon: the estimator sees single reports.
        "olh": lambda: _build(LongitudinalOLH, OLH(eps_inf, d, g=choose_g(eps, d)), eps, eps_inf),
    }
    return builders[name]()
