"""The SDK's exceptions.  Network trouble is never raised from ``record``.

Exception tree::

    Exception
    ├── SdkError                 base of everything the SDK raises itself
    │   ├── ConfigError          (also a ValueError) a bad Client/Fleet argument
    │   └── StateError           (also an OSError) state_dir unusable: not a
    │                            directory, wrong permissions, corrupt files
    └── ValueError               from ``record``: the value is outside the
                                 metric's domain (the message names it)

Delivery failures (offline, 5xx, 429, a 4xx that drops reports) are not
exceptions: they are retried, or counted in ``Client.counters()``.

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
