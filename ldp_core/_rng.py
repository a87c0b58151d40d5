"""Randomness for the device path.

Every Bernoulli trial is decided by comparing a uniform integer with an integer
threshold; no float is ever compared with ``random.random()`` and no sampler
takes a float logarithm (Mironov 2012).  The default source is the operating
system's CSPRNG; a seeded ``random.Random`` may be injected for tests and
simulation only.

>>> import random
>>> bernoulli(1, 2, random.Random(0)) in (0, 1)
True
"""

from __future__ import annotations

import os
import secrets
from array import array
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = [
    "SYSTEM_RNG",
    "Rng",
    "bernoulli",
    "random_bytes",
    "ratio_draws",
    "resolve",
    "uniform_words",
    "words",
]

#: Resolution of every probability threshold: probabilities are num / 2**32.
WORD_BITS = 32
WORD = 1 << WORD_BITS


class Rng(Protocol):
    """What a randomiser needs: exact uniform integers.

    ``secrets.SystemRandom`` and ``random.Random`` both satisfy it.
    """

    def randrange(self, start: int, stop: int | None = ..., step: int = ...) -> int: ...

    def getrandbits(self, k: int, /) -> int: ...


#: The OS CSPRNG (``os.urandom`` under the hood).  The only default.
SYSTEM_RNG: Rng = secrets.SystemRandom()


def resolve(rng: Rng | None) -> Rng:
    """The injected generator, or the OS CSPRNG when none was given."""
    return SYSTEM_RNG if rng is None else rng


def bernoulli(num: int, den: int, rng: Rng) -> int:
    """1 with probability exactly ``num / den``, else 0."""
    return int(rng.randrange(den) < num)


def uniform_words(count: int, rng: Rng) -> array[int]:
    """``count`` independent uniform integers in [0, 2**32), drawn in one call."""
    if count == 0:
        return array("I")
    if rng is SYSTEM_RNG:
        raw = os.urandom(4 * count)  # what SystemRandom.getrandbits reads, minus an int round trip
    else:
        raw = rng.getrandbits(WORD_BITS * count).to_bytes(4 * count, "little")
    words = array("I")
    words.frombytes(raw)
    return words


def random_bytes(count: int, rng: Rng) -> bytes:
    """``count`` independent uniform bytes (the OS CSPRNG reads them directly)."""
    if rng is SYSTEM_RNG:
        return os.urandom(count)
    return rng.getrandbits(8 * count).to_bytes(count, "little") if count else b""


def words(gen: Any, n: int) -> npt.NDArray[np.int64]:
    """n uniform integers in [0, 2**32) from a numpy Generator, as the device draws them."""
    import numpy as np

    return gen.integers(0, WORD, size=n, dtype=np.int64)  # type: ignore[no-any-return]


def ratio_draws(num: int, den: int, n: int, gen: Any) -> npt.NDArray[np.bool_]:
    """n Bernoulli(num/den) by an integer comparison, like ``_rng.bernoulli``."""
    import numpy as np

    return gen.integers(0, den, size=n, dtype=np.int64) < num  # type: ignore[no-any-return]


assert array("I").itemsize == 4, "ldp_core needs 32-bit unsigned array items"
