"""problem+json (RFC 9457): the server kit's one vocabulary, re-exported for the aggregator.

Every error the aggregator returns has ``type``, ``title``, ``status``,
``detail`` and ``code``; the codes are ``ldp_server.problems.CODES`` (the
same table as the collector's), stable across releases.

>>> Problem(404, "unknown_metric", "no metric named 'x'").body()["type"]
'https://ldp-telemetry.dev/problems/unknown_metric'
"""

from __future__ import annotations

from ldp_server.problems import CODES, MEDIA_TYPE, Problem, install_handlers, problem_response

__all__ = ["CODES", "MEDIA_TYPE", "Problem", "install_handlers", "problem_response"]
