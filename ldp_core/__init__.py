"""ldp_core: every local-DP mechanism of ldp-telemetry, defined once.

Standard library only (numpy is imported lazily by server-side helpers), so it
ships to devices.  Each family lives in one module of ``ldp_core.mechanisms``;
``ldp_core.registry`` builds ``mechanism()`` and ``longitudinal()`` from them.

>>> from ldp_core import mechanism
>>> m = mechanism("oue", epsilon=1.0, domain_size=64)
>>> len(m.counters(m.randomize(17))) <= 64
True
"""

from ldp_core.base import Kind, Mechanism, Payload, Report
from ldp_core.capabilities import Bounded, Hashed, Memoisable, Numeric, WindowedNumeric
from ldp_core.epsilon import adversary_accuracy
from ldp_core.errors import ReportError
from ldp_core.mechanisms._two_level import TwoLevel
from ldp_core.mechanisms.binary import BinaryRR, ForcedResponse, LongitudinalBinaryRR
from ldp_core.mechanisms.grr import GRR, LongitudinalGRR
from ldp_core.mechanisms.mean import LongitudinalOneBitMean, OneBitMean
from ldp_core.mechanisms.olh import OLH
from ldp_core.mechanisms.olh_memo import LongitudinalOLH
from ldp_core.mechanisms.unary import OUE, SUE, LongitudinalOUE, LongitudinalSUE, UnaryEncoding
from ldp_core.registry import NAMES, AutoChoice, auto_choice, longitudinal, mechanism

__all__ = [
    "GRR",
    "NAMES",
    "OLH",
    "OUE",
    "SUE",
    "AutoChoice",
    "BinaryRR",
    "Bounded",
    "ForcedResponse",
    "Hashed",
    "Kind",
    "LongitudinalBinaryRR",
    "LongitudinalGRR",
    "LongitudinalOLH",
    "LongitudinalOUE",
    "LongitudinalOneBitMean",
    "LongitudinalSUE",
    "Mechanism",
    "Memoisable",
    "Numeric",
    "OneBitMean",
    "Payload",
    "Report",
    "ReportError",
    "TwoLevel",
    "UnaryEncoding",
    "WindowedNumeric",
    "adversary_accuracy",
    "auto_choice",
    "longitudinal",
    "mechanism",
]
