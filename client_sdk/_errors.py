"""The SDK's exceptions.  Network trouble is never raised from ``record``.

Exception tree::

    Exception
    ├── SdkError                 base of everything the SDK raises itself
    │   ├── ConfigError          (also a ValueError) a bad Client/Fleet argument
    │   └── StateError           (also an OSError) state_dir unusable: not a
    │                            directory, wrong permissions, corrupt files,
    │                            written by a newer SDK.  Never raised by
    │                            ``Client(...)``: see below.  ``Fleet(state_dir=)``
    │                            (simulations) still raises it
    └── ValueError               from ``record`` with ``strict=True``: the value is
                                 outside the metric's domain (the message names it)

Delivery failures (offline, 5xx, 429, a 4xx that drops reports) are not
exceptions: they are retried, or counted in ``Client.counters()``.

A ``Client`` whose state folder cannot be created, secured or opened does not
raise either: it starts disabled with a reason, logs one WARNING (the folder
and the error), counts ``counters().config_errors["state_unavailable"]``, and
every ``record`` answers ``state_unavailable`` (counted in ``refused``).  It
does not fall back to memory: the budget ledger and the device secret must
outlive the process, or every restart would spend the metric's budget again
and draw new permanent responses for memoised metrics.

>>> issubclass(ConfigError, ValueError) and issubclass(StateError, OSError)
True
"""

from __future__ import annotations

__all__ = ["ConfigError", "SdkError", "StateError"]


class SdkError(Exception):
    """Base class of the exceptions the SDK raises itself."""


class ConfigError(SdkError, ValueError):
    """A bad argument to ``Client``, ``Fleet`` or ``DeliveryConfig``."""


class StateError(SdkError, OSError):
    """The state directory cannot be used safely."""
