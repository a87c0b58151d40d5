"""Strings nobody listed (``prefix_olh``): the codec, exact support counts, discovery.

Statistical tests use fixed seeds; each tolerance comes from the variance and
states its false-positive rate.
"""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from ldp_core import mechanism
from ldp_core.mechanisms._alphabet import Alphabet
from ldp_core.mechanisms.prefix import Discovery, PrefixOLH
from ldp_core.mechanisms.prefix_discovery import extension_counts, extensions


def binomial_upper(trials: int, rate: float, alpha: float) -> int:
    """Least k with P[Bin(trials, rate) > k] <= alpha (exact sum)."""
    tail = 1.0
    for k in range(trials + 1):
        tail -= math.comb(trials, k) * rate**k * (1 - rate) ** (trials - k)
        if tail <= alpha:
            return k
    return trials


def random_strings(count: int, seed: int, longest: int = 6) -> list[str]:
    rng = random.Random(seed)
    out: set[str] = set()
    while len(out) < count:
        out.add("".join(rng.choice("abcdefghijklmnopqrstuvwxyz")
                        for _ in range(rng.randint(1, longest))))
    return sorted(out)


# -- the codec --------------------------------------------------------------------


def test_normalisation_is_nfc_then_casefold_as_the_spec_says() -> None:
    folded = Alphabet.parse("a-z", 8, casefold=True)
    kept = Alphabet.parse("a-zA-Zé", 8, casefold=False)
    assert folded.code("HeLLo") == folded.code("hello")
    assert kept.code("e\u0301") == kept.code("\u00e9")  # NFD input, NFC symbol
    assert kept.code("Hello") != kept.code("hello")
    assert folded.code("Straße") == folded.code("STRASSE")  # case folding: ß -> ss
    with pytest.raises(ValueError, match="outside the alphabet"):
        folded.code("café")
    raw = Alphabet.parse("bytes", 4)
    assert raw.text(raw.code("é!")) == "é!"  # two UTF-8 bytes and one
    with pytest.raises(ValueError, match="longer than max_length"):
        raw.code("ééé")


@pytest.mark.parametrize(
    ("spec", "length", "named"),
    [("", 6, "alphabet"), ("a-z", 0, "max_length"), ("a-z", 14, "at most 2"), ("aa", 4, "twice"),
     ("A-Z", 4, "case-folding"),
     # Refused before 27**(10**8) is computed (that power alone stalled a thread).
     ("a-z", 10**8, r"max_length must be an integer in \[1, 62\]")],
)
def test_bad_alphabets_are_value_errors_naming_the_problem(spec: str, length: int,
                                                           named: str) -> None:
    with pytest.raises(ValueError, match=named):
        Alphabet.parse(spec, length)


def test_every_code_below_the_base_is_a_one_symbol_string_and_holes_are_refused() -> None:
    a = Alphabet.parse("a-z", 3)
    assert [a.text(c) for c in range(1, 4)] == ["a", "b", "c"]
    assert a.check_code(a.code("abc")) == a.code("abc")
    with pytest.raises(ValueError, match="after the end"):
        a.check_code(27)  # "", then "a": a symbol after the end mark


# -- exact support counts -----------------------------------------------------------


def test_extension_counts_equal_the_sum_over_seeds_exactly() -> None:
    """The direction-grouped sums give C(P + e) = sum_s T[s, h_s(P + e)] exactly."""
    m = PrefixOLH(epsilon=2.0, seeds=64)
    gen = np.random.default_rng(3)
    codes = np.array([m.check_value(s) for s in random_strings(200, 1)])
    # 40 reports per string: counters above 1 (weights) and zeros (the sparse pass)
    tallies = m.simulate_counts(codes, np.full(len(codes), 40), gen)
    blocks = tallies.reshape(len(m.cuts), m.seeds, m.g)
    for level, prev in enumerate((0, *m.cuts[:-1])):
        survivors = np.unique(codes % m.alphabet.base**prev)[:5] if prev else np.zeros(1, int)
        grid, offset = extensions(m, level)
        counts = extension_counts(m, level, blocks[level], survivors, grid)
        for i, prefix in enumerate(survivors):
            for k in range(0, len(offset), 41):
                code = int(prefix + offset[k])
                brute = sum(int(blocks[level][s, m.bucket(level, s, code)])
                            for s in range(m.seeds))
                assert counts[i, k] == brute


def test_the_registry_builds_it_from_a_spec_and_the_device_reports_one_counter() -> None:
    m = mechanism("prefix_olh", epsilon=4.0, max_length=6, alphabet="a-z")
    assert isinstance(m, PrefixOLH) and m.kind == "string"
    report = m.randomize("Hello", rng=random.Random(1))
    assert isinstance(report, int) and m.counters(report) == (report,)
    assert 0 <= report < m.num_counters
    assert m.decode(m.encode(report)) == report


# -- discovery ------------------------------------------------------------------------

HEAVY = {"hello": 0.20, "world": 0.12, "ab": 0.08, "zzzzzz": 0.06, "q": 0.05}
TRIALS = 24
N = 40_000


def heavy_workload(seed: int) -> tuple[list[str], np.ndarray]:
    """HEAVY plus 3,000 random strings sharing the rest uniformly (N reports)."""
    tail = [s for s in random_strings(3000, seed) if s not in HEAVY]
    strings = [*HEAVY, *tail]
    rest = 1 - sum(HEAVY.values())
    shares = np.array([*HEAVY.values(), *[rest / len(tail)] * len(tail)])
    counts = np.random.default_rng(seed).multinomial(N, shares)
    return strings, counts


@pytest.fixture(scope="module")
def discoveries() -> list[tuple[dict[str, float], Discovery]]:
    m = PrefixOLH(epsilon=4.0)
    out: list[tuple[dict[str, float], Discovery]] = []
    for trial in range(TRIALS):
        strings, counts = heavy_workload(trial)
        codes = np.array([m.check_value(s) for s in strings])
        tallies = m.simulate_counts(codes, counts, np.random.default_rng(1000 + trial))
        truth = {s: c / N for s, c in zip(strings, counts, strict=True)}
        out.append((truth, m.discover(tallies, confidence=0.95)))
    return out


def test_strings_far_above_the_detection_threshold_are_always_found(
    discoveries: list[tuple[dict[str, float], Discovery]],
) -> None:
    """The least heavy share (0.05) is over 2x the threshold the answer states, where a
    miss needs an estimate more than 8 standard deviations low (P < 1e-15 each)."""
    for _, found in discoveries:
        assert 0 < found.threshold < 0.025
        names = {f.value for f in found.found if f.confident}
        assert set(HEAVY) <= names


def test_intervals_cover_the_true_shares_at_the_stated_rate(
    discoveries: list[tuple[dict[str, float], Discovery]],
) -> None:
    """24 trials x 5 heavy strings = 120 intervals at 95%: the misses exceed the bound
    below with probability <= 1e-6 if the intervals hold their rate."""
    misses = 0
    for truth, found in discoveries:
        for f in found.found:
            if f.value in HEAVY:
                misses += not f.ci_low <= truth[f.value] <= f.ci_high
    assert misses <= binomial_upper(TRIALS * len(HEAVY), 0.05, 1e-6)


def test_estimates_are_unbiased(discoveries: list[tuple[dict[str, float], Discovery]]) -> None:
    """Mean error over 24 trials of each heavy string, against its stated standard error
    / sqrt(24): |z| > 5.9 with Bonferroni over 5 strings has probability < 1e-6."""
    for value in HEAVY:
        errors, stderrs = [], []
        for truth, found in discoveries:
            f = next(x for x in found.found if x.value == value)
            errors.append(f.estimate - truth[value])
            stderrs.append(f.stderr)
        z = float(np.mean(errors)) / (float(np.sqrt(np.mean(np.square(stderrs)))) / TRIALS**0.5)
        assert abs(z) < 5.9, (value, z)


def test_rare_distinct_strings_give_almost_no_confident_discoveries() -> None:
    """Every device holds its own string: nothing is heavy.  Each run expects at most
    0.05 false discoveries (Bonferroni over the last level); over 12 runs the total is
    at most Poisson(0.6) in expectation, and > 8 with probability < 1e-6."""
    m = PrefixOLH(epsilon=4.0)
    false = 0
    for trial in range(12):
        strings = random_strings(10_000, 500 + trial)
        codes = np.array([m.check_value(s) for s in strings])
        tallies = m.simulate_counts(codes, np.ones(len(codes), dtype=np.int64),
                                    np.random.default_rng(trial))
        false += sum(f.confident for f in m.discover(tallies).found)
    assert false <= 8


SIBLINGS = {"hello": 0.15, "hell": 0.06, "help": 0.06, "he": 0.05, "hz": 0.05}


def test_strings_that_share_prefixes_are_all_found() -> None:
    """A parent's mass split over sure children must not sink any of them (``chain``
    takes the others out of the parent's mass, never the candidate itself).  Each
    share is over 2x the stated threshold, and a miss needs its estimate (or its
    parent's) over 8 standard deviations low: P < 1e-15 per string and trial.  The
    exact arithmetic of ``chain`` is its doctest."""
    m = PrefixOLH(epsilon=4.0)
    for trial in range(8):
        tail = [s for s in random_strings(3000, 300 + trial) if s not in SIBLINGS]
        strings = [*SIBLINGS, *tail]
        rest = 1 - sum(SIBLINGS.values())
        shares = np.array([*SIBLINGS.values(), *[rest / len(tail)] * len(tail)])
        counts = np.random.default_rng(trial).multinomial(N, shares)
        codes = np.array([m.check_value(s) for s in strings])
        tallies = m.simulate_counts(codes, counts, np.random.default_rng(2000 + trial))
        found = m.discover(tallies)
        assert found.threshold < 0.025
        assert set(SIBLINGS) <= {f.value for f in found.found if f.confident}
