"""ldp_core: every local-DP mechanism of ldp-telemetry, defined once.

Standard library only (numpy is imported lazily by server-side helpers), so it
ships to devices.

>>> from ldp_core import mechanism
>>> m = mechanism("oue", epsilon=1.0, domain_size=64)
>>> len(m.counters(m.randomize(17))) <= 64
True
"""

from ldp_core.base import Kind, Mechanism, Payload, Report
from ldp_core.binary import BinaryRR, ForcedResponse
from ldp_core.epsilon import adversary_accuracy
from ldp_core.errors import ReportError
from ldp_core.grr import GRR
from ldp_core.longitudinal import TwoLevel, longitudinal
from ldp_core.mean import OneBitMean
from ldp_core.olh import OLH
from ldp_core.registry import NAMES, AutoChoice, auto_choice, mechanism
from ldp_core.unary import OUE, SUE, UnaryEncoding

__all__ = [
    "GRR",
    "NAMES",
    "OLH",
    "OUE",
    "SUE",
    "AutoChoice",
    "BinaryRR",
    "ForcedResponse",
    "Kind",
    "Mechanism",
    "OneBitMean",
    "Payload",
    "Report",
    "ReportError",
    "TwoLevel",
    "UnaryEncoding",
    "adversary_accuracy",
    "auto_choice",
    "longitudinal",
    "mechanism",
]
