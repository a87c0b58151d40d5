"""The permanent level over time: pinned draws, constant work, and the grid's edges.

A change in the permanent level's draw order would silently redraw every
device's memoised answers, which is a fresh leak of epsilon_inf per device
and value: the golden responses below pin them for every registered two-level
class (a new class fails here until its golden line is added).
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from ldp_core import Memoisable, mechanism, memo
from ldp_core.registry import classes, longitudinal

CONTEXT = "golden|3f2a"
#: permanent_response(value, bytes([s]) * 32, CONTEXT) for s in 0..5, value in VALUES,
#: at epsilon = 0.5, epsilon_inf = 1.0, d = 20 (lo = 0, hi = 1 for the mean).
GOLDEN: dict[str, list[Any]] = {
    "binary_rr": [1, 1, 0, 1, 0, 0, 1, 1, 1, 1, 0, 0],
    "grr": [9, 7, 5, 7, 14, 0, 0, 7, 13, 0, 17, 13, 4, 1, 14, 5, 2, 19],
    "sue": [
        (0, 2, 3, 6, 7, 8, 11, 13, 14, 18),
        (0, 1, 4, 6, 7, 9, 13, 15, 18),
        (2, 3, 7, 9, 14, 17),
        (0, 6, 8, 11, 13, 16, 18),
        (0, 2, 3, 4, 9, 10, 12, 15, 16, 18, 19),
        (0, 3, 5, 10, 12, 18),
        (0, 3, 8, 9, 11, 12, 16, 19),
        (0, 1, 2, 3, 6, 11, 14, 15, 16, 18, 19),
        (2, 3, 4, 6, 8, 10, 11, 14, 16, 17, 19),
        (0, 2, 4, 7, 10, 15, 16, 17, 19),
        (2, 3, 4, 5, 7, 8, 11, 12, 13, 15, 18, 19),
        (1, 5),
        (0, 3, 4, 5, 9, 10, 11, 14, 15, 17),
        (3, 5, 6, 7, 9, 10, 12, 13, 17),
        (1, 5, 8, 9, 12, 13, 14, 15, 17, 19),
        (1, 6, 7, 8, 12, 15, 17),
        (2, 3, 5, 6, 7, 10, 16),
        (0, 2, 10, 11, 15, 16, 17, 18),
    ],
    "oue": [
        (0, 2, 3, 6, 7, 8, 11, 13, 14, 18),
        (0, 1, 4, 6, 9, 13, 15, 18),
        (2, 3, 7, 9, 14),
        (0, 6, 8, 11, 13, 16, 18),
        (0, 3, 4, 9, 10, 12, 15, 18),
        (0, 3, 5, 12, 18),
        (0, 3, 8, 9, 11, 12, 16, 19),
        (0, 3, 18, 19),
        (2, 3, 4, 8, 11, 14, 16, 17),
        (0, 2, 10, 15, 16),
        (2, 4, 5, 7, 8, 12, 13, 15, 18, 19),
        (5,),
        (0, 3, 4, 5, 9, 11, 14, 15),
        (3, 5, 6, 7, 9, 10, 13),
        (1, 5, 9, 12, 13, 14, 15, 19),
        (7, 8, 12, 15, 17),
        (2, 3, 5, 6, 7, 10, 16),
        (0, 2, 10, 11, 16, 18),
    ],
    # Two-level OLH's permanent level is GRR(eps_inf) over d, drawn as two-level GRR's
    # (the same DRBG stream); the SDK's memo context (mechanism fingerprint) keeps
    # the two metrics' streams apart.
    "olh": [9, 7, 5, 7, 14, 0, 0, 7, 13, 0, 17, 13, 4, 1, 14, 5, 2, 19],
    "one_bit_mean": [1, 1, 0, 1, 0, 1, 0, 1, 1, 0, 0, 1, 0, 0, 1, 0, 0, 0],
    "hadamard": [2, 0, 31, 0, 5, 3, 26, 21, 21, 2, 18, 7, 14, 25, 23, 27, 2, 31],
    # alpha-point rounding (the device offset) then the cell of the grid point.
    "piecewise": [36, 214, 334, 39, 452, 405, 6, 422, 376, 319, 75, 257, 35, 193, 425, 272,
                  424, 392],
    # Memoised strings (a-z, 6 symbols; the values are the codes of "", "g", "s"):
    # (level S + seed) g + B', a prefix_olh report at eps_inf (level, seed, then the GRR).
    "prefix_olh": [67154, 129980, 153185, 127194, 110268, 169131, 173629, 172188, 176951,
                   85208, 70874, 123827, 14891, 160929, 159325, 153171, 150516, 76763],
}


def _values(m: Any) -> list[float | int]:
    if m.kind == "mean":
        return [0.0, 0.25, 1.0]
    return [0, 1] if m.kind == "binary" else [0, 7, 19]


def _build(name: str) -> Any:
    return longitudinal(name, epsilon=0.5, epsilon_inf=1.0, domain_size=20, lo=0.0, hi=1.0)


@pytest.mark.parametrize("name", [cls.name for cls in classes(levels=2)])
def test_golden_permanent_responses(name: str) -> None:
    m = _build(name)
    drawn = [
        m.permanent_response(v, bytes([s]) * 32, CONTEXT) for s in range(6) for v in _values(m)
    ]
    assert name in GOLDEN, f"pin the golden responses of {name}: {drawn!r}"
    assert drawn == GOLDEN[name]


@pytest.mark.parametrize("name", [cls.name for cls in classes(levels=2)])
def test_permanent_work_does_not_depend_on_the_value(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same number of DRBG generate calls and bytes for every value and secret."""
    calls: list[int] = []
    original = memo.HmacDrbg.generate

    def counting(self: memo.HmacDrbg, count: int) -> bytes:
        calls.append(count)
        return original(self, count)

    monkeypatch.setattr(memo.HmacDrbg, "generate", counting)
    m = longitudinal(name, epsilon=1.0, epsilon_inf=3.0, domain_size=200, lo=0.0, hi=1.0)
    assert isinstance(m, Memoisable)
    work = set()
    for v in range(50):
        if m.kind == "string":  # 1 to 6 letters
            value = m.check_value("abcdefghijklmnopqrstuvwxyz"[v % 26] * (1 + v % 6))
        else:
            value = m.check_value(v / 49 if m.kind == "mean" else v % m.domain_size)
        for s in range(4):
            calls.clear()
            m.permanent_response(value, bytes([s]) * 32, CONTEXT)
            work.add(tuple(calls))
    assert len(work) == 1, work


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("grr", {"epsilon": 1e-5, "domain_size": 65536}),  # the inverted channel
        ("olh", {"epsilon": 1e-11, "domain_size": 64}),
        ("oue", {"epsilon": 1e-12, "domain_size": 8}),
        ("sue", {"epsilon": 1e-12, "domain_size": 8}),
        ("hadamard", {"epsilon": 1e-12, "domain_size": 8}),
        ("binary_rr", {"epsilon": 1e-12}),
        ("forced_response", {"epsilon": 1e-12}),
        ("one_bit_mean", {"epsilon": 1e-12, "lo": 0.0, "hi": 1.0}),
    ],
)
def test_an_epsilon_below_the_grid_is_refused(name: str, params: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=r"too small|below the 2\*\*-32 grid"):
        mechanism(name, **params)


@pytest.mark.parametrize("epsilon", [1e-9, 1e-7, 1e-4, 0.01, 1.0, 5.0, 20.0])
def test_epsilon_actual_is_never_negative_nor_above_the_request(epsilon: float) -> None:
    for name in (n for n in ("binary_rr", "forced_response", "grr", "oue", "hadamard")):
        try:
            m = mechanism(name, epsilon=epsilon, domain_size=16)
        except ValueError:
            continue  # refused: below the grid
        assert 0 < m.epsilon_actual <= m.epsilon <= epsilon + 1e-12, (name, m.epsilon_actual)
        assert m.q_star < m.p_star


def test_forced_response_never_rounds_above_the_request() -> None:
    for epsilon in (1e-8, 1e-6, 0.3, 1.0, math.log(3), 7.0):
        m = mechanism("forced_response", epsilon=epsilon)
        assert m.epsilon <= epsilon
