"""``Client``: one device's SDK object.

>>> with Client("http://127.0.0.1:8000", api_key="ingest-key",
...             state_dir="/tmp/ldp-state") as ldp:          # doctest: +SKIP
...     ldp.record("browser", "firefox")        # randomised now, queued, returns at once
...     ldp.record("session_minutes", 12.5)
>>> print(ldp.privacy_report())                               # doctest: +SKIP

What ``record`` does, in order (none of it touches the network):

1. ``enabled=False``, after ``opt_out()`` or ``close()``: returns at once, collects nothing.
2. Looks the metric up in the spec catalog (fetched from the collector in the
   background and cached in ``state_dir``).  Unknown: returns
   ``RecordResult("unknown_metric")`` and asks the sender to refresh the specs;
   call ``refresh_metrics(timeout)`` first if the first record must count.
   A spec changed under its version is ``spec_conflict``; one above the
   device's ``PrivacyCaps`` is ``spec_over_cap`` (each logged once at WARNING).
3. ``spec.index_of(value)``: a value outside the domain raises ``ValueError``
   (the message names it) -- a programming error, not a runtime condition.
4. ``sample_rate``: with probability 1 - rate, returns ``sampled_out`` (no epsilon).
5. The budget ledger (``client_sdk._ledger``), one sqlite transaction on the
   state folder: one unit is (this device, metric *name*, epoch); the default
   budget per unit is the metric's epsilon, i.e. one report per epoch.  Over
   budget: ``over_budget`` (nothing randomised, nothing sent).  The epoch is
   never earlier than the latest one charged for the name (a clock set back
   buys nothing).
6. Randomises (memoised for longitudinal metrics), builds the envelope with the
   per-epoch token and spools it in the same transaction; the value goes out
   of scope when ``record`` returns.

The ledger charges the mechanism's declared epsilon (an upper bound on the
epsilon its integer thresholds implement), and sums are rounded up.  A unit
is per metric *name*: a new version of a spec shares the budget of its name.
``budgets={"m": 2.0}`` allows two reports per epoch locally, but the token
issuer gives one token per (install, metric, version, epoch), so the second
is dropped as ``token_limit`` -- raise budgets only with an issuer configured
for it.  For memoised metrics the lifetime ledger charges ``epsilon_inf`` once
per permanent response drawn (per distinct value and mechanism fingerprint,
keyed by an HMAC); ``lifetime_budgets`` caps the sum per name, and an opt-out
does not reset it.

Any number of Clients and processes may share one ``state_dir`` (a forked
child, a second process of the app): the ledger is the file, so one unit is
spent once whoever asks.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from client_sdk._catalog import Catalog
from client_sdk._config import DeliveryConfig, PrivacyCaps
from client_sdk._device import (
    DeviceState,
    delete_secret,
    load_or_create_secret,
    make_private_dir,
    tighten_files,
)
from client_sdk._errors import ConfigError
from client_sdk._ledger import SqliteLedger
from client_sdk._pipeline import Pipeline
from client_sdk._record import Sampler, build_report, record_into
from client_sdk._results import (
    Counters,
    PrivacyReport,
    RecordResult,
)
from client_sdk._store import Store
from client_sdk._transport import Transport, UrllibTransport
from ldp_core._rng import Rng
from ldp_core.metric import MetricSpec

__all__ = ["Client"]

SECRET_FILE = "device_secret"  # noqa: S105 (a file name)
SPOOL_FILE = "spool.sqlite3"
METRICS_FILE = "metrics.json"
OPT_OUT_FILE = "opted_out"


class Client:
    """The SDK for one device.  Thread-safe and fork-safe; see the module docstring.

    url, api_key      the collector and an ingest key
    state_dir         the SDK's own folder (0700; every file in it 0600): secret, spec
                      cache, spool and ledger
    transport         a ``Transport`` (default: ``UrllibTransport``)
    enabled           False: collect nothing, touch no file, start no thread
    background        False: no sender thread; call ``flush(timeout)`` to send
    delivery          a ``DeliveryConfig`` (batching, retries, quotas, durability)
    sample_rate       probability of keeping a record (one float, or per metric)
    budgets           epsilon per unit for chosen metrics (default: the metric's epsilon)
    lifetime_budgets  cap on the lifetime epsilon of memoised metrics (default: none)
    caps              ``PrivacyCaps``: specs above them are refused (default: epsilon 4
                      per report, epsilon_inf 8)
    metrics           spec JSON objects to seed the catalog with (tests, offline apps)
    clock, rng        for tests only (the device path uses time.time and the OS CSPRNG)
    """

    def __init__(
        self,
        url: str,
        *,
        api_key: str,
        state_dir: str | os.PathLike[str],
        transport: Transport | None = None,
        enabled: bool = True,
        background: bool = True,
        delivery: DeliveryConfig | None = None,
        sample_rate: float | Mapping[str, float] = 1.0,
        budgets: Mapping[str, float] | None = None,
        lifetime_budgets: Mapping[str, float] | None = None,
        caps: PrivacyCaps | None = None,
        metrics: Iterable[dict[str, Any]] | None = None,
        clock: Callable[[], float] = time.time,
        rng: Rng | None = None,
    ) -> None:
        if not url.startswith(("http://", "https://")):
            raise ConfigError(f"collector url must start with http:// or https://, got {url!r}")
        if not api_key:
            raise ConfigError("api_key is required")
        self._caps = caps or PrivacyCaps()
        self._enabled = enabled
        self._sampler = Sampler(sample_rate)
        self._budgets = dict(budgets or {})
        self._lifetime_budgets = dict(lifetime_budgets or {})
        self._clock = clock
        self._rng = rng
        self._closed = False
        self._state_dir = Path(state_dir)
        self._device: DeviceState | None = None
        self._pipeline: Pipeline | None = None
        self.config = delivery or DeliveryConfig()
        if not enabled:
            return
        make_private_dir(self._state_dir)
        tighten_files(self._state_dir)
        self._opted_out = (self._state_dir / OPT_OUT_FILE).exists()
        catalog = Catalog(self._state_dir / METRICS_FILE)
        if metrics is not None:
            catalog.update(metrics)
        store = Store(self._state_dir / SPOOL_FILE, max_reports=self.config.max_reports,
                      max_bytes=self.config.max_bytes)
        self._pipeline = Pipeline(url, api_key, store, catalog, transport or UrllibTransport(),
                                  self.config, background=background)
        self._ledger = SqliteLedger(store)
        if self._opted_out:
            self._pipeline.stop()
        else:
            self._start_device()
            if background:
                self._pipeline.kick()

    def _start_device(self) -> None:
        self._device = DeviceState(load_or_create_secret(self._state_dir / SECRET_FILE),
                                   self._ledger)
        if self._pipeline is not None:
            self._pipeline.tokens.default_install = self._device.install

    # -- recording ---------------------------------------------------------------------

    def record(self, metric: str, value: object) -> RecordResult:
        """Randomise ``value`` for ``metric`` and queue only the report.  Never blocks
        on the network, never raises for a network problem; ValueError for a value
        outside the metric's domain."""
        pipeline, device = self._pipeline, self._device
        if pipeline is None:
            return RecordResult("disabled", metric)
        if self._closed:
            return RecordResult("closed", metric)
        if device is None:
            pipeline.refused("opted_out")
            return RecordResult("opted_out", metric)
        return record_into(
            pipeline, device, metric, value, sampler=self._sampler, caps=self._caps,
            budgets=self._budgets, lifetime_budgets=self._lifetime_budgets, now=self._clock(),
            rng=self._rng,
        )

    # -- delivery ----------------------------------------------------------------------

    def flush(self, timeout: float = 10.0) -> bool:
        """Send what is queued; True if nothing is pending when it returns."""
        if self._pipeline is None:
            return True
        return self._pipeline.flush(timeout)

    def close(self, timeout: float = 5.0) -> bool:
        """Flush within ``timeout``, then stop; unsent reports stay in the spool.

        True if nothing was left pending; calling it again just answers that again.
        """
        if self._pipeline is None:
            return True
        self._closed = True
        return self._pipeline.close(timeout)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close(self.config.atexit_timeout)

    def refresh_metrics(self, timeout: float = 2.0) -> bool:
        """Fetch the metric specs now (bounded); True on success."""
        return self._pipeline is not None and self._pipeline.refresh_metrics(timeout)

    def metrics(self) -> list[MetricSpec]:
        """The specs this device knows."""
        if self._pipeline is None:
            return []
        cat = self._pipeline.catalog
        return [spec for name in cat.names() if (spec := cat.get(name)) is not None]

    def counters(self) -> Counters:
        return Counters() if self._pipeline is None else self._pipeline.counters()

    # -- privacy -----------------------------------------------------------------------

    @property
    def opted_out(self) -> bool:
        return self._pipeline is not None and self._device is None

    def opt_out(self) -> None:
        """Stop collecting; purge the queue and the spool, delete the device secret.

        Persisted: a later Client on the same state_dir stays opted out until
        ``opt_in()``.  The ledger (epsilon spent and HMAC keys under the deleted
        secret: no value in it) is kept, so ``privacy_report()`` still tells what
        was spent and an opt-in cannot reset the lifetime budgets.
        """
        if self._pipeline is None:
            return
        marker = self._state_dir / OPT_OUT_FILE
        fd = os.open(marker, os.O_WRONLY | os.O_CREAT, 0o600)
        os.close(fd)
        self._device = None
        self._pipeline.stop()
        self._pipeline.purge("opt_out")
        delete_secret(self._state_dir / SECRET_FILE)

    def opt_in(self) -> None:
        """Collect again, with a new device secret (new tokens, new memoisation).

        New permanent responses are new draws: each is charged to the lifetime
        ledger on top of what was spent before the opt-out."""
        if self._pipeline is None or self._device is not None:
            return
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._state_dir / OPT_OUT_FILE)
        self._start_device()
        self._pipeline.resume()

    def privacy_report(self) -> PrivacyReport:
        """Epsilon spent per unit (device, metric name, epoch) and per memoised lifetime,
        summed over every spec version and every process sharing the state folder
        (opted out or not: what was spent stays on record)."""
        if self._pipeline is None:
            return PrivacyReport((), ())
        return build_report(self._ledger.spend(), self._pipeline.catalog, self._budgets,
                            self._lifetime_budgets)

