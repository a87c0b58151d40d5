"""One registry: ``mechanism(name, ...)`` builds any mechanism by name.

>>> mechanism("grr", epsilon=2.0, domain_size=4).name
'grr'
>>> mechanism("auto", epsilon=1.0, domain_size=4).name    # d < 3 e^eps + 2
'grr'
>>> mechanism("auto", epsilon=1.0, domain_size=1024).name
'olh'
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import TypeVar

from ldp_core.base import Mechanism, check_domain_size
from ldp_core.binary import BinaryRR, ForcedResponse, exact_probability
from ldp_core.epsilon import check_epsilon
from ldp_core.grr import GRR
from ldp_core.mean import OneBitMean
from ldp_core.olh import OLH
from ldp_core.unary import OUE, SUE

__all__ = ["NAMES", "AutoChoice", "auto_choice", "mechanism"]

NAMES = ("binary_rr", "forced_response", "grr", "sue", "oue", "olh", "one_bit_mean", "auto")

#: OLH is taken over OUE when its variance is within this factor: its report is
#: a seed and a bucket instead of d bits.
REPORT_SIZE_TOLERANCE = 1.05


@dataclass(frozen=True)
class AutoChoice:
    """What ``auto`` compared (rare-value variance x n, exact) and what it took."""

    chosen: str
    variances: dict[str, float]


def auto_choice(epsilon: float, domain_size: int) -> AutoChoice:
    """The lowest-variance frequency mechanism for (d, eps), OLH on near ties with OUE."""
    eps, d = check_epsilon(epsilon), check_domain_size(domain_size)
    variances = {
        "grr": GRR(eps, d).unit_variance(),
        "oue": OUE(eps, d).unit_variance(),
        "olh": OLH(eps, d).unit_variance(),
    }
    chosen = min(variances, key=variances.__getitem__)
    if chosen == "oue" and variances["olh"] <= REPORT_SIZE_TOLERANCE * variances["oue"]:
        chosen = "olh"
    return AutoChoice(chosen=chosen, variances=variances)


def mechanism(
    name: str,
    *,
    epsilon: float | None = None,
    domain_size: int | None = None,
    lo: float | None = None,
    hi: float | None = None,
    p: float | Fraction | None = None,
    truth: float | Fraction | None = None,
    yes: float | Fraction | None = None,
    g: int | None = None,
) -> Mechanism:
    """Build a mechanism by name; every bad parameter is a ValueError naming it.

    - ``binary_rr``: ``epsilon=`` or ``p=`` (keep probability)
    - ``forced_response``: ``truth=`` and ``yes=`` (coins), or ``epsilon=``
    - ``grr``, ``sue``, ``oue``, ``olh`` (optional ``g=``), ``auto``:
      ``epsilon=``, ``domain_size=``
    - ``one_bit_mean``: ``epsilon=``, ``lo=``, ``hi=``
    """
    if name == "binary_rr":
        if p is not None:
            return BinaryRR.from_p(p)
        return BinaryRR.from_epsilon(_need(epsilon, "epsilon", name))
    if name == "forced_response":
        if truth is not None or yes is not None or epsilon is None:
            return ForcedResponse(
                truth=Fraction(1, 2) if truth is None else exact_probability(truth, "truth"),
                yes=Fraction(1, 2) if yes is None else exact_probability(yes, "yes"),
            )
        return ForcedResponse.from_epsilon(_need(epsilon, "epsilon", name))
    if name == "one_bit_mean":
        return OneBitMean(
            _need(epsilon, "epsilon", name), _need(lo, "lo", name), _need(hi, "hi", name)
        )
    eps = _need(epsilon, "epsilon", name)
    d = _need(domain_size, "domain_size", name)
    if name == "auto":
        name = auto_choice(eps, d).chosen
    if name == "grr":
        return GRR(eps, d)
    if name == "sue":
        return SUE(eps, d)
    if name == "oue":
        return OUE(eps, d)
    if name == "olh":
        return OLH(eps, d, g=g)
    raise ValueError(f"unknown mechanism {name!r}; known: {', '.join(NAMES)}")


T = TypeVar("T")


def _need(value: T | None, what: str, name: str) -> T:
    if value is None:
        raise ValueError(f"mechanism {name!r} needs {what}=")
    return value
