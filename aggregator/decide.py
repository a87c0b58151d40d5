"""The decision helper: which is larger, only when the data say so.

The rule: build the two-sided interval of the difference at the asked
confidence; answer only when it excludes 0, else "too close to call".

For two values of one categorical metric the two estimates come from the same
reports and are correlated (negatively for GRR, OLH and unary encodings).
Whatever the correlation, Var(a - b) <= (se_a + se_b)^2 (Cauchy-Schwarz), so
the interval uses se_a + se_b: conservative, never overconfident.  Against a
fixed threshold the stderr is the estimate's own.

>>> decide(0.10, 0.02, 0.95).verdict
'greater'
>>> decide(0.01, 0.02, 0.95).verdict
'too_close_to_call'
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from aggregator.estimate import z_value

__all__ = ["Decision", "Verdict", "decide"]

Verdict = Literal["greater", "less", "too_close_to_call"]


@dataclass(frozen=True)
class Decision:
    """The difference (left - right), its interval and the verdict."""

    difference: float
    stderr: float
    ci_low: float
    ci_high: float
    confidence: float
    verdict: Verdict

    def to_json(self) -> dict[str, Any]:
        return {
            "difference": self.difference,
            "stderr": self.stderr,
            "ci_low": self.ci_low,
            "ci_high": self.ci_high,
            "confidence": self.confidence,
            "verdict": self.verdict,
        }


def decide(difference: float, stderr: float, confidence: float) -> Decision:
    """Greater / less when the interval of ``difference`` excludes 0, else abstain."""
    half = z_value(confidence) * stderr
    low, high = difference - half, difference + half
    verdict: Verdict = "greater" if low > 0 else "less" if high < 0 else "too_close_to_call"
    return Decision(difference, stderr, low, high, confidence, verdict)
