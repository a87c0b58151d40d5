"""The projective hash family of OLH: h_a(v) = <a, digits_g(v)> mod g over PG(L-1, g).

The algebra behind ``ldp_core.mechanisms.olh``: the family's size and collision
rate, its seed vectors, a cached hash table, and the support counts of all
values by one FFT over GF(g)^L.  numpy is imported lazily (server side).

>>> family(3, 1024)[:2]
(7, 1093)
>>> base_digits(5, 3, 3)
(0, 1, 2)
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from fractions import Fraction
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = [
    "base_digits",
    "digits_needed",
    "family",
    "hash_table",
    "is_prime",
    "seed_matrix",
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
