"""The projective hash family of OLH: h_a(v) = <a, digits_g(v)> mod g over PG(L-1, g).

The algebra behind ``ldp_core.mechanisms.olh``: the family's size and collision
rate, its seed vectors, a cached hash table, and the support counts of all
values by one FFT over GF(g)^L.  numpy is imported lazily (server side).

>>> family(3, 1024)[:2]
(7, 1093)
>>> h = Projective(3, 1024)
>>> h.num_seeds, h.bucket(5, 17) == int(h.hashes([5], [17])[0])
(1093, True)
>>> base_digits(5, 3, 3)
(0, 1, 2)
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = [
    "Projective",
    "base_digits",
    "bucket_sizes",
    "digits_needed",
    "family",
    "hash_table",
    "is_prime",
    "projective",
    "seed_matrix",
    "smallest_bucket",
    "support_counts",
]


def is_prime(n: int) -> bool:
    return n >= 2 and all(n % k for k in range(2, math.isqrt(n) + 1))


def digits_needed(g: int, domain_size: int) -> int:
    length, span = 1, g
    while span < domain_size:
        length, span = length + 1, span * g
    return length


def family(g: int, domain_size: int) -> tuple[int, int, Fraction]:
    """(L, S, c) of the projective family for g buckets over d values."""
    length = digits_needed(g, domain_size)
    seeds = (g**length - 1) // (g - 1)
    collide = Fraction(g ** (length - 1) - 1, g**length - 1)
    return length, seeds, collide


def support_counts(
    g: int, length: int, size: int, tallies: Sequence[int] | npt.NDArray[np.int64]
) -> list[int]:
    """C(v) = sum over seeds s of T[s, h_s(v)], by a Fourier transform over GF(g)^L.

    With F(v) = C(v) on all of GF(g)^L, the transform is supported on the lines
    through the seeds: F^(0) = g^(L-1) n and F^(k a_s) = g^(L-1) sum_y T[s, y]
    w^(-k y) for k != 0 (w = e^(2 pi i / g)), because the character of k a_s is
    constant on each level set {v: <a_s, v> = y} and every other nonzero
    character sums to 0 over it.  Each nonzero w is k a_s for exactly one
    projective seed, so one FFT over the buckets of every seed and one inverse
    g^L-point FFT give C exactly (rounded; float64 is exact far beyond any
    realistic n): O(S g + g^L L log g) instead of O(S d).
    """
    import numpy as np

    table = np.asarray(tallies, dtype=np.int64)
    num_seeds = (g**length - 1) // (g - 1)
    if table.shape != (num_seeds * g,):
        raise ValueError(f"tally vector has shape {table.shape}, olh needs ({num_seeds * g},)")
    table = table.reshape(num_seeds, g)
    spectrum = np.fft.fft(table.astype(np.float64), axis=1)
    full = np.zeros(g**length, dtype=np.complex128)
    full[0] = float(table.sum())
    seeds = seed_matrix(g, length)
    powers = g ** np.arange(length - 1, -1, -1, dtype=np.int64)
    for k in range(1, g):
        full[((k * seeds) % g) @ powers] = spectrum[:, k]
    counts = np.fft.ifftn(full.reshape((g,) * length)).real.ravel()[:size]
    return [int(x) for x in np.rint(counts * g ** (length - 1))]


def _level_profile(g: int, size: int) -> list[tuple[int, int, int, int]]:
    """(U, M, D, R) for each k, the last nonzero coordinate of a seed (size < g^L).

    [0, size) is a union of blocks: for each digit position i and each t < D_i
    (D the base-g digits of ``size``), the values with prefix (D_0..D_{i-1}, t)
    and free digits after i.  A seed a whose last nonzero coordinate is k
    spreads a block with a free digit at k evenly over the g buckets (U in all,
    from the blocks at i < k), and sends every other block whole to one
    bucket: the D_k blocks at i = k (M = g^(L-1-k) values each) to the D_k
    distinct buckets h0 + a_k t, and the rest at i > k (R = size mod g^(L-1-k)
    values) to h0 + a_k D_k.  So the sizes are U + M (D_k buckets), U + R (one)
    and U (the other g - D_k - 1), whatever the other coordinates of a.
    """
    length = digits_needed(g, size)
    digits = base_digits(size, g, length)
    out = []
    for k in range(length):
        spread = sum(digits[i] * g ** (length - 2 - i) for i in range(k))
        out.append((spread, g ** (length - 1 - k), digits[k], size % g ** (length - 1 - k)))
    return out


def smallest_bucket(g: int, size: int) -> int:
    """The fewest values of [0, size) that share a bucket of some seed, among the
    buckets holding at least one value and not all of them (pure Python, O(L)).

    >>> smallest_bucket(3, 1024)     # 3^5 values: a bucket of seeds ending at digit 1
    243
    >>> smallest_bucket(5, 5), smallest_bucket(2, 16)
    (1, 8)
    """
    length = digits_needed(g, size)
    if g**length == size:
        return int(g ** (length - 1))  # every hyperplane of GF(g)^L
    sizes: set[int] = set()
    for spread, block, count, rest in _level_profile(g, size):
        if count:
            sizes.add(spread + block)
        sizes.add(spread + rest)
        if g - count - 1:
            sizes.add(spread)
    return min(n for n in sizes if 0 < n < size)


def bucket_sizes(g: int, size: int) -> npt.NDArray[np.int64]:
    """N[s, y] = #{v in [0, size): h_s(v) = y}, shape (S, g), from the block structure
    of ``_level_profile`` (O(S L g), never O(S size)).

    >>> bucket_sizes(3, 4).tolist()      # 0, 1, 2 | 3 by the leading digit, then ...
    [[3, 1, 0], [1, 2, 1], [1, 2, 1], [2, 1, 1]]
    """
    import numpy as np

    length = digits_needed(g, size)
    seeds = seed_matrix(g, length)
    if g**length == size:
        return np.full((len(seeds), g), g ** (length - 1), dtype=np.int64)
    digits = np.array(base_digits(size, g, length), dtype=np.int64)
    last = length - 1 - np.argmax(seeds[:, ::-1] != 0, axis=1)
    out = np.zeros((len(seeds), g), dtype=np.int64)
    for k, (spread, block, count, rest) in enumerate(_level_profile(g, size)):
        rows = np.flatnonzero(last == k)
        h0 = (seeds[rows, :k] @ digits[:k]) % g
        step = seeds[rows, k]
        out[rows] = spread
        for t in range(count):
            out[rows, (h0 + step * t) % g] += block
        out[rows, (h0 + step * count) % g] += rest
    return out


@functools.lru_cache(maxsize=16)
def seed_matrix(g: int, length: int) -> npt.NDArray[np.int64]:
    import numpy as np

    blocks = []
    for lead in range(length):
        free = length - 1 - lead
        tails = np.arange(g**free, dtype=np.int64)
        powers = g ** np.arange(free - 1, -1, -1, dtype=np.int64)
        block = np.zeros((g**free, length), dtype=np.int64)
        block[:, lead] = 1
        if free:
            block[:, lead + 1 :] = (tails[:, None] // powers[None, :]) % g
        blocks.append(block)
    matrix = np.concatenate(blocks)
    matrix.flags.writeable = False
    return matrix


def base_digits(value: int, base: int, length: int) -> tuple[int, ...]:
    digits = [0] * length
    for i in range(length - 1, -1, -1):
        value, digits[i] = divmod(value, base)
    return tuple(digits)


@functools.lru_cache(maxsize=4)
def hash_table(g: int, length: int, seeds: int, size: int) -> Any:
    """h_s(v) for every seed and value as uint8/uint16 (None above 2**24 cells)."""
    import numpy as np

    if seeds * size > 1 << 24:
        return None
    powers = g ** np.arange(length - 1, -1, -1, dtype=np.int64)
    digits = (np.arange(size, dtype=np.int64)[:, None] // powers[None, :]) % g
    dtype = np.uint8 if g < 256 else np.uint16
    table = ((seed_matrix(g, length) @ digits.T) % g).astype(dtype)
    table.flags.writeable = False
    return table


@dataclass(frozen=True)
class Projective:
    """The family for g buckets over [0, size): seeds, h_s, and decoding by FFT.

    Every pair of distinct values collides on the same fraction ``collision`` of
    the seeds, which is what makes the hashed mechanisms' channels exact.
    """

    g: int
    size: int

    @property
    def length(self) -> int:
        return digits_needed(self.g, self.size)

    @property
    def num_seeds(self) -> int:
        return family(self.g, self.size)[1]

    @property
    def collision(self) -> Fraction:
        """P[h_s(v) = h_s(v')] for any v != v', over the uniform seed."""
        return family(self.g, self.size)[2]

    def seed_vector(self, seed: int) -> tuple[int, ...]:
        """The projective point a_s: zeros, a leading 1, then base-g digits."""
        rest, length = seed, self.length
        for lead in range(length):
            block = self.g ** (length - 1 - lead)
            if rest < block:
                return (0,) * lead + (1,) + base_digits(rest, self.g, length - 1 - lead)
            rest -= block
        raise ValueError(f"seed {seed} not in [0, {self.num_seeds})")

    def bucket(self, seed: int, value: int) -> int:
        """h_seed(value) = <a_seed, digits(value)> mod g."""
        digits = base_digits(value, self.g, self.length)
        return sum(a * x for a, x in zip(self.seed_vector(seed), digits, strict=True)) % self.g

    def seed_matrix(self) -> npt.NDArray[np.int64]:
        """All seed vectors, shape (S, L) (computed once per (g, L), read-only)."""
        return seed_matrix(self.g, self.length)

    def digit_matrix(self, values: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """Base-g digits (most significant first) of ``values``, shape (len, L)."""
        import numpy as np

        powers = self.g ** np.arange(self.length - 1, -1, -1, dtype=np.int64)
        return (values[:, None] // powers[None, :]) % self.g

    def hashes(self, seeds: Any, values: Any) -> npt.NDArray[np.int64]:
        """h_seed(value) elementwise (a cached table when small)."""
        import numpy as np

        seeds, values = np.asarray(seeds, dtype=np.int64), np.asarray(values, dtype=np.int64)
        table = hash_table(self.g, self.length, self.num_seeds, self.size)
        if table is not None:
            return table[seeds, values].astype(np.int64)  # type: ignore[no-any-return]
        rows = self.seed_matrix()[seeds] * self.digit_matrix(values)
        return rows.sum(axis=1) % self.g  # type: ignore[no-any-return]

    def buckets_of(self, value: int) -> npt.NDArray[np.int64]:
        """h_s(value) for every seed s, shape (S,)."""
        import numpy as np

        digits = self.digit_matrix(np.array([value], dtype=np.int64))[0]
        return (self.seed_matrix() @ digits) % self.g  # type: ignore[no-any-return]

    def support_counts(self, table: Sequence[int] | npt.NDArray[np.int64]) -> list[int]:
        """C(v) = sum_s T[s, h_s(v)] for every value, T of shape S x g (flattened)."""
        return support_counts(self.g, self.length, self.size, table)


@functools.lru_cache(maxsize=64)
def projective(g: int, size: int) -> Projective:
    """The (cached) family for g buckets over [0, size)."""
    return Projective(g, size)

