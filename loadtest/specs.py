"""The load-test metrics: one per mechanism family (registered by ``loadtest/run.sh``)."""

from __future__ import annotations

from typing import Any

__all__ = ["SPEC_BODIES"]

#: POST /v1/metrics bodies: boolean, categorical GRR / OLH / OUE, numeric.
SPEC_BODIES: list[dict[str, Any]] = [
    {"name": "lt.dark_mode", "kind": "boolean", "epsilon": 1.0, "mechanism": "binary_rr",
     "min_reports": 10},
    {"name": "lt.browser", "kind": "categorical", "epsilon": 2.0, "mechanism": "grr",
     "domain": ["chrome", "safari", "edge", "firefox", "samsung", "opera", "brave", "other"],
     "min_reports": 10},
    {"name": "lt.country", "kind": "categorical", "epsilon": 1.0, "mechanism": "olh",
     "domain": [f"c{i:03d}" for i in range(200)], "min_reports": 10},
    {"name": "lt.page", "kind": "categorical", "epsilon": 1.0, "mechanism": "oue",
     "domain": [f"/page/{i}" for i in range(32)], "min_reports": 10},
    {"name": "lt.load_ms", "kind": "numeric", "epsilon": 1.0, "lo": 0, "hi": 5000,
     "min_reports": 10},
]


