"""Exceptions raised by the mechanism core.

``ValueError``
    A bad mechanism parameter or a true value outside the domain.  The message
    names the bad value.
``ReportError`` (a ``ValueError``)
    A randomised report that no honest device could have produced under the
    mechanism (wrong length, bucket out of range, ...).  ``code`` is a stable,
    machine-readable reason that the collector returns as is.
"""

from __future__ import annotations

__all__ = ["ReportError"]


class ReportError(ValueError):
    """A report rejected by a mechanism; ``code`` is stable across releases.

    >>> ReportError("bucket_out_of_range", "bucket 9 not in [0, 4)").code
    'bucket_out_of_range'
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
