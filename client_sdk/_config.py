"""Delivery settings and the retry policy (capped exponential backoff, full jitter).

>>> cfg = DeliveryConfig(batch_size=50, interval=5.0)
>>> 0.0 <= cfg.backoff_delay(attempt=3, uniform=lambda a, b: b) <= cfg.backoff_max
True
>>> cfg.retry_after_delay("120")          # seconds, clamped to retry_after_max
120.0
>>> cfg.retry_after_delay("9999")
300.0
>>> cfg.retry_after_delay("soon") is None
True
>>> PrivacyCaps().allows(epsilon=1.0, epsilon_inf=4.0), PrivacyCaps().allows(5.0, None)
(True, False)
"""

from __future__ import annotations

import email.utils
import math
import os
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from client_sdk._errors import ConfigError
from ldp_core.wire import MAX_BATCH

__all__ = [
    "Connection", "DeliveryConfig", "HoldConfig", "PrivacyCaps", "default_state_dir",
]


@dataclass(frozen=True)
class DeliveryConfig:
    """How reports are batched, spooled and retried.

    batch_size        send when this many reports wait (<= 1000, the wire limit)
    interval          ... or when the oldest waiting report is this old (seconds)
    request_timeout   per HTTP request (seconds)
    gzip              compress batches (Content-Encoding: gzip)
    backoff_base      first retry waits up to this long (full jitter) ...
    backoff_max       ... doubling per failure up to this cap
    retry_after_min   a 429/503 Retry-After is clamped to [min, max]; the retry
    retry_after_max   waits max(clamped Retry-After, jittered backoff)
    max_reports       spool quota in reports (oldest dropped first, counted)
    max_bytes         spool quota in bytes of report rows
    durability        "record": every record is in the spool file when record()
                      returns (survives kill -9); "batch": records are written to
                      the spool by the sender within ``persist_interval``
                      (faster; a kill -9 loses the last moments, never sends twice)
    persist_interval  write-behind period in "batch" mode (seconds)
    metrics_ttl       refetch the metric specs this often (seconds)
    atexit_timeout    deadline of the flush at interpreter exit (seconds)
    token_ahead       report tokens kept for the next k epochs of each epoch length,
                      topped up at a random moment of each epoch (>= 2; <= 2 for
                      "day" under the collector's default 48 h ahead window)
    token_delay       seconds: after a token request, the install's reports wait a
                      random delay in [token_delay, 2 * token_delay) before they
                      leave (not those of its very first epoch)
    """

    batch_size: int = 100
    interval: float = 30.0
    request_timeout: float = 10.0
    gzip: bool = True
    backoff_base: float = 0.5
    backoff_max: float = 60.0
    retry_after_min: float = 0.0
    retry_after_max: float = 300.0
    max_reports: int = 10_000
    max_bytes: int = 16 * 1024 * 1024
    durability: str = "record"
    persist_interval: float = 0.05
    metrics_ttl: float = 3600.0
    atexit_timeout: float = 2.0
    token_ahead: int = 2
    token_delay: float = 600.0

    def __post_init__(self) -> None:
        if not 1 <= self.batch_size <= MAX_BATCH:
            raise ConfigError(f"batch_size must be in [1, {MAX_BATCH}], got {self.batch_size}")
        for name in ("interval", "request_timeout", "backoff_base", "backoff_max",
                     "persist_interval", "metrics_ttl"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise ConfigError(f"{name} must be a finite number > 0, got {value!r}")
        if not 0 <= self.retry_after_min <= self.retry_after_max:
            raise ConfigError("need 0 <= retry_after_min <= retry_after_max")
        if self.max_reports < 1 or self.max_bytes < 1:
            raise ConfigError("spool quotas must be >= 1")
        if self.durability not in ("record", "batch"):
            raise ConfigError(f"durability must be 'record' or 'batch', got {self.durability!r}")
        if self.atexit_timeout < 0:
            raise ConfigError("atexit_timeout must be >= 0")
        if isinstance(self.token_ahead, bool) or not isinstance(self.token_ahead, int) \
                or not 2 <= self.token_ahead <= 1000:
            raise ConfigError(f"token_ahead must be an int in [2, 1000], got {self.token_ahead!r}")
        if not (isinstance(self.token_delay, int | float) and math.isfinite(self.token_delay)
                and self.token_delay >= 0):
            raise ConfigError(f"token_delay must be a finite number >= 0, got {self.token_delay!r}")

    def backoff_delay(self, attempt: int, uniform: Callable[[float, float], float]) -> float:
        """Full jitter: uniform in [0, min(cap, base * 2**(attempt-1))] for attempt >= 1."""
        ceiling = min(self.backoff_max, self.backoff_base * 2.0 ** min(max(attempt - 1, 0), 62))
        return uniform(0.0, ceiling)

    def retry_after_delay(self, header: str | None, now: float | None = None) -> float | None:
        """Seconds to wait from a Retry-After header (seconds or HTTP date), clamped."""
        if header is None:
            return None
        text = header.strip()
        seconds: float | None = None
        if text.isdigit():
            seconds = float(text)
        else:
            try:
                when = email.utils.parsedate_to_datetime(text)
            except (TypeError, ValueError, IndexError):
                return None
            if when is None:
                return None
            seconds = when.timestamp() - (time.time() if now is None else now)
        return min(max(seconds, self.retry_after_min), self.retry_after_max)


@dataclass(frozen=True)
class PrivacyCaps:
    """The most privacy loss this device accepts from any metric spec.

    epsilon      cap on a spec's epsilon per report (default 4)
    epsilon_inf  cap on a memoised spec's lifetime epsilon_inf per value (default 8)
    lifetime_multiple  the default lifetime budget of a memoised metric name: this many
                 times the epsilon_inf of the name's first permanent response on this
                 device (default 4, at least 1); spec versions that change the mechanism
                 draw new permanent responses only within it (``over_lifetime_budget``).
                 ``lifetime_budgets={"name": x}`` sets a name's own (``math.inf``: none)

    Specs come from the collector, signed off by whoever holds an admin key; the
    caps are the device's own line, so a compromised or careless admin cannot
    turn the randomisation into a formality.  A spec above them is refused on the
    device: ``record`` answers ``spec_over_cap``, counted, with one WARNING per
    metric, and nothing is randomised, charged or sent.  At epsilon = 4 one report
    already lets an observer guess a yes/no answer right 98.2% of the time
    (e^4 / (1 + e^4)); see notes/sdk-readme.md for the choice of defaults.
    """

    epsilon: float = 4.0
    epsilon_inf: float = 8.0
    lifetime_multiple: float = 4.0

    def __post_init__(self) -> None:
        for name in ("epsilon", "epsilon_inf", "lifetime_multiple"):
            value = getattr(self, name)
            least = 1 if name == "lifetime_multiple" else 0
            if (isinstance(value, bool) or not isinstance(value, int | float)
                    or not math.isfinite(value) or value <= 0 or value < least):
                raise ConfigError(f"caps: {name} must be a finite number"
                                  f" {'>= 1' if least else '> 0'}, got {value!r}")

    def allows(self, epsilon: float, epsilon_inf: float | None) -> bool:
        """True if a spec with these epsilons is within the caps."""
        return epsilon <= self.epsilon and (epsilon_inf is None or epsilon_inf <= self.epsilon_inf)


# -- where the SDK finds its collector, key and state folder ------------------------------

#: Environment variables read when an argument is not given.
ENV_URL, ENV_KEY, ENV_STATE = "LDP_COLLECTOR_URL", "LDP_API_KEY", "LDP_STATE_DIR"
#: The folder name under the platform's per-user state folder.
APP_FOLDER = "ldp-telemetry"


def default_state_dir(
    platform: str | None = None, env: Mapping[str, str] | None = None, home: Path | None = None,
) -> Path:
    """The per-user, per-platform folder for the SDK's state (secret, specs, spool).

    Linux and other Unix: ``$XDG_STATE_HOME/ldp-telemetry`` or
    ``~/.local/state/ldp-telemetry``; macOS: ``~/Library/Application
    Support/ldp-telemetry``; Windows: ``%LOCALAPPDATA%\\ldp-telemetry``.

    >>> default_state_dir("linux", {"XDG_STATE_HOME": "/s"}, Path("/h")).as_posix()
    '/s/ldp-telemetry'
    >>> default_state_dir("linux", {}, Path("/h")).as_posix()
    '/h/.local/state/ldp-telemetry'
    >>> default_state_dir("darwin", {}, Path("/Users/a")).as_posix()
    '/Users/a/Library/Application Support/ldp-telemetry'
    >>> default_state_dir("win32", {"LOCALAPPDATA": "C:/Users/a/AppData/Local"},
    ...                   Path("C:/Users/a")).as_posix()
    'C:/Users/a/AppData/Local/ldp-telemetry'
    """
    platform = sys.platform if platform is None else platform
    env = os.environ if env is None else env
    home = Path.home() if home is None else home
    if platform.startswith("win"):
        base = env.get("LOCALAPPDATA")
        return (Path(base) if base else home / "AppData" / "Local") / APP_FOLDER
    if platform == "darwin":
        return home / "Library" / "Application Support" / APP_FOLDER
    xdg = env.get("XDG_STATE_HOME")
    # XDG: a relative path is invalid and must be ignored.
    base_dir = Path(xdg) if xdg and Path(xdg).is_absolute() else home / ".local" / "state"
    return base_dir / APP_FOLDER


@dataclass(frozen=True)
class Connection:
    """The collector URL, ingest key and state folder of a ``Client``, each from its
    argument, else its environment variable, else (state folder only) the default.

    >>> c = Connection.resolve(None, None, None, env={"LDP_COLLECTOR_URL":
    ...     "https://c.example", "LDP_API_KEY": "k", "LDP_STATE_DIR": "/tmp/s"})
    >>> c.url, c.api_key, c.state_dir.as_posix()
    ('https://c.example', 'k', '/tmp/s')
    >>> Connection.resolve(None, "k", "/tmp/s", env={})
    Traceback (most recent call last):
    client_sdk._errors.ConfigError: no collector url: pass url= or set LDP_COLLECTOR_URL
    """

    url: str
    api_key: str
    state_dir: Path

    @classmethod
    def resolve(
        cls,
        url: str | None,
        api_key: str | None,
        state_dir: str | os.PathLike[str] | None,
        *,
        env: Mapping[str, str] | None = None,
    ) -> Connection:
        env = os.environ if env is None else env
        url = url or env.get(ENV_URL) or None
        if not url:
            raise ConfigError(f"no collector url: pass url= or set {ENV_URL}")
        api_key = api_key or env.get(ENV_KEY) or None
        if not api_key:
            raise ConfigError(f"no api_key: pass api_key= or set {ENV_KEY}")
        folder = state_dir if state_dir is not None else env.get(ENV_STATE) or None
        return cls(url, api_key,
                   Path(folder) if folder is not None else default_state_dir(env=env))


@dataclass(frozen=True)
class HoldConfig:
    """How a ``Client`` holds values of metrics it does not know yet (a first run).

    Until the first successful fetch of the metric specs, a ``record`` of an
    unknown metric keeps the value in memory only (never on disk), answers
    ``held``, and is randomised and spooled as soon as the specs arrive.  At most
    ``max_values`` values are held (the newest beyond that are refused as
    ``unknown_metric``), each for at most ``max_seconds``; then it is forgotten
    and counted (``refused["hold_expired"]``).  A process that exits first loses
    them, unsent and uncharged.  ``max_values=0`` turns holding off.

    >>> HoldConfig().max_values, HoldConfig().max_seconds
    (1000, 600.0)
    """

    max_values: int = 1000
    max_seconds: float = 600.0

    def __post_init__(self) -> None:
        if isinstance(self.max_values, bool) or not isinstance(self.max_values, int) or (
                self.max_values < 0):
            raise ConfigError(f"hold: max_values must be an int >= 0, got {self.max_values!r}")
        if not (isinstance(self.max_seconds, int | float) and math.isfinite(self.max_seconds)
                and self.max_seconds > 0):
            raise ConfigError(f"hold: max_seconds must be a finite number > 0,"
                              f" got {self.max_seconds!r}")
