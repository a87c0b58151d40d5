"""The alphabet of a string metric: normalisation, validation and the integer code.

A string metric names its alphabet (ranges such as ``"a-z"`` or ``"a-z0-9_"``,
or ``"bytes"``) and a maximum length.  On the device a value is normalised to
Unicode NFC, then case-folded when the spec says so, then checked symbol by
symbol; ``"bytes"`` takes the UTF-8 bytes of the normalised text.

Symbols are numbered from 1 (0 marks "the string has ended"), and a string
s_0 s_1 ... of length <= L is the integer sum_i sym(s_i) B^i with B = |alphabet|
+ 1: the first symbol is the least significant digit, so the prefix of length
l is ``code % B**l`` and every code below B is a one-symbol string.

>>> a = Alphabet.parse("a-z", max_length=6)
>>> a.base, a.size
(27, 387420489)
>>> a.code("Ab"), a.text(a.code("Ab"))
(55, 'ab')
>>> a.prefix(a.code("hello"), 2) == a.code("he")
True
>>> a.code("héllo")
Traceback (most recent call last):
...
ValueError: value 'héllo' has 'é', outside the alphabet a-z
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

__all__ = ["MAX_CODE", "Alphabet"]

#: Codes stay below 2**62 so that numpy's int64 holds them (a-z: 13 letters).
MAX_CODE = 1 << 62
#: The longest string any alphabet can allow (the smallest base is 2, and B**L <= 2**62).
MAX_LENGTH = 62
_RANGE = re.compile(r"(.)-(.)", re.DOTALL)


def _expand(spec: str) -> tuple[str, ...]:
    """``"a-z0-9_"`` -> the symbols, in order, each once."""
    out: list[str] = []
    rest = spec
    while rest:
        match = _RANGE.match(rest)
        if match and match.group(1) <= match.group(2):
            out.extend(chr(c) for c in range(ord(match.group(1)), ord(match.group(2)) + 1))
            rest = rest[3:]
        else:
            out.append(rest[0])
            rest = rest[1:]
    if len(set(out)) != len(out):
        raise ValueError(f"alphabet {spec!r} names a symbol twice")
    return tuple(out)


@dataclass(frozen=True)
class Alphabet:
    """Symbols (or bytes), the maximum length and whether text is case-folded."""

    spec: str
    max_length: int
    casefold: bool
    symbols: tuple[str, ...]

    @classmethod
    def parse(cls, spec: str, max_length: int, casefold: bool = True) -> Alphabet:
        """Check the parameters; every bad one is a ValueError naming it.

        >>> Alphabet.parse("a-z", 10**8)
        Traceback (most recent call last):
        ValueError: max_length must be an integer in [1, 62], got 100000000
        """
        if not isinstance(spec, str) or not spec or len(spec) > 256:
            raise ValueError(f"alphabet must be 'bytes' or symbols such as 'a-z', got {spec!r}")
        symbols = () if spec == "bytes" else _expand(spec)
        if spec != "bytes" and len(symbols) > 255:
            raise ValueError(f"alphabet {spec!r} has {len(symbols)} symbols (at most 255)")
        if any(unicodedata.normalize("NFC", s) != s for s in symbols):
            raise ValueError(f"alphabet {spec!r} holds a symbol that is not in NFC")
        if casefold and any(s.casefold() != s for s in symbols):
            raise ValueError(f"alphabet {spec!r} holds a symbol that case-folding removes")
        # Checked before B**L is ever computed: a max_length of 10**8 would stall the
        # thread computing it.  B >= 2, so B**L <= 2**62 needs L <= 62 anyway.
        if (isinstance(max_length, bool) or not isinstance(max_length, int)
                or not 1 <= max_length <= MAX_LENGTH):
            raise ValueError(
                f"max_length must be an integer in [1, {MAX_LENGTH}], got {max_length!r}")
        made = cls(spec, max_length, bool(casefold), symbols)
        if made.size > MAX_CODE:
            raise ValueError(
                f"max_length {max_length} over alphabet {spec!r} has {made.base}^{max_length} "
                f"codes (at most 2^62)"
            )
        return made

    @property
    def base(self) -> int:
        """B: the symbols and the end mark."""
        return 257 if self.spec == "bytes" else len(self.symbols) + 1

    @property
    def size(self) -> int:
        """B^L: the codes of all strings of length <= L (and some with holes)."""
        return int(self.base**self.max_length)

    def normalise(self, value: str) -> str:
        """NFC, then case-folded when the metric says so (the device applies this)."""
        text = unicodedata.normalize("NFC", value)
        return unicodedata.normalize("NFC", text.casefold()) if self.casefold else text

    def symbols_of(self, value: object) -> tuple[int, ...]:
        """The symbol numbers (1..B-1) of a value, or a ValueError naming it."""
        if not isinstance(value, str):
            raise ValueError(f"value {value!r} is not a string")
        text = self.normalise(value)
        if self.spec == "bytes":
            raw = text.encode("utf-8")
            syms = tuple(b + 1 for b in raw)
        else:
            index = {s: i + 1 for i, s in enumerate(self.symbols)}
            bad = next((ch for ch in text if ch not in index), None)
            if bad is not None:
                raise ValueError(f"value {value!r} has {bad!r}, outside the alphabet {self.spec}")
            syms = tuple(index[ch] for ch in text)
        if len(syms) > self.max_length:
            raise ValueError(
                f"value {value!r} is longer than max_length {self.max_length} after normalisation"
            )
        return syms

    def code(self, value: object) -> int:
        """The integer code of a string (see the module docstring)."""
        return sum(s * self.base**i for i, s in enumerate(self.symbols_of(value)))

    def digits(self, code: int, length: int | None = None) -> tuple[int, ...]:
        """The first ``length`` symbol numbers of a code (0 past the end)."""
        out = []
        for _ in range(self.max_length if length is None else length):
            code, digit = divmod(code, self.base)
            out.append(digit)
        return tuple(out)

    def check_code(self, code: object) -> int:
        """``code`` if it is the code of a string (no symbol after an end mark)."""
        if isinstance(code, bool) or not isinstance(code, int) or not 0 <= code < self.size:
            raise ValueError(f"value {code!r} is not a string code in [0, {self.size})")
        digits = self.digits(code)
        ended = next((i for i, d in enumerate(digits) if d == 0), len(digits))
        if any(digits[ended:]):
            raise ValueError(f"value {code!r} has a symbol after the end of the string")
        return code

    def prefix(self, code: int, length: int) -> int:
        """The code of the first ``length`` symbols."""
        return int(code % self.base**length)

    def text(self, code: int) -> str:
        """The string of a code (bytes that are not UTF-8 are shown escaped)."""
        digits = [d for d in self.digits(code) if d]
        if self.spec == "bytes":
            return bytes(d - 1 for d in digits).decode("utf-8", errors="backslashreplace")
        return "".join(self.symbols[d - 1] for d in digits)
