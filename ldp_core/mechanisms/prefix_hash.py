"""The public hash family of the prefix levels, and the choice of its prime g.

Shared by ``prefix`` (one level), ``prefix_memo`` (two levels) and discovery
(``prefix_discovery``): a report of level j with seed s hashes the prefix x of
length l_j to h_s(x) = <a_{j,s}, x> mod g, the seed vectors a_{j,s} uniform
over GF(g)^{l_j}, drawn from SHAKE-256 of (g, level, seed) by rejection (public,
the same on every device and server).

>>> list(seed_vector(0, 7, 2, 53)) == seed_vectors(0, 16, 2, 53)[7].tolist()
True
"""

from __future__ import annotations

import functools
import hashlib
import math
from typing import TYPE_CHECKING

from ldp_core.mechanisms._projective import is_prime

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = [
    "DEFAULT_SEEDS",
    "choose_prime",
    "default_cuts",
    "default_shares",
    "seed_vector",
    "seed_vectors",
]

DEFAULT_SEEDS = 2048


def seed_vector(level: int, seed: int, length: int, g: int) -> tuple[int, ...]:
    """a_{level, seed}: ``length`` digits uniform in GF(g), from SHAKE-256 by rejection.

    >>> seed_vector(0, 7, 2, 53) == seed_vector(0, 7, 2, 53)
    True
    """
    limit = (1 << 16) - (1 << 16) % g
    out: list[int] = []
    size = 4 * length + 8
    while len(out) < length:
        out.clear()
        stream = hashlib.shake_256(f"ldp-prefix/{g}/{level}/{seed}".encode()).digest(size)
        for i in range(0, size, 2):
            word = int.from_bytes(stream[i : i + 2], "little")
            if word < limit:
                out.append(word % g)
                if len(out) == length:
                    break
        size *= 2
    return tuple(out)


@functools.lru_cache(maxsize=16)
def seed_vectors(level: int, seeds: int, length: int, g: int) -> npt.NDArray[np.int64]:
    """All a_{level, s}, shape (S, length), read-only (server side)."""
    import numpy as np

    table = np.array([seed_vector(level, s, length, g) for s in range(seeds)], dtype=np.int64)
    table.flags.writeable = False
    return table


def default_cuts(max_length: int) -> tuple[int, ...]:
    """Every second prefix length, and the whole string: (2, 4, 6) for 6."""
    return (*range(2, max_length, 2), max_length)


def default_shares(cuts: tuple[int, ...]) -> tuple[int, ...]:
    """Weight of level j proportional to its prefix length: the last level, whose
    reports give the final estimates, gets the most."""
    return tuple(cuts)


def choose_prime(epsilon: float, base: int) -> int:
    """The prime g >= B with the lowest OLH variance q(1-q)/(p-q)^2 (q = 1/g).

    >>> choose_prime(4.0, 27), choose_prime(1.0, 27)
    (53, 29)
    """
    e = math.exp(epsilon)
    best: tuple[float, int] | None = None
    g = base
    while g <= max(2 * base, int(2 * e) + 3):
        if is_prime(g):
            p, q = e / (e + g - 1), 1 / g
            var = q * (1 - q) / (p - q) ** 2
            if best is None or var < best[0]:
                best = (var, g)
        g += 1
    assert best is not None
    return best[1]
