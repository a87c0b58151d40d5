"""aggregator: tallies in, estimates with honest intervals out.

>>> from aggregator import estimate     # the library; the service is aggregator.app
"""

from aggregator.consistency import norm_sub, simplex_projection
from aggregator.estimate import (
    FrequencyEstimate,
    ScalarEstimate,
    estimate,
    exact_count_variance,
    exact_mean_variance,
    z_value,
)

__all__ = [
    "FrequencyEstimate",
    "ScalarEstimate",
    "estimate",
    "exact_count_variance",
    "exact_mean_variance",
    "norm_sub",
    "simplex_projection",
    "z_value",
]
