"""``Client``: one device's SDK object.

>>> with Client("https://collector.example", api_key="ingest-key",
...             metrics="metrics.json") as ldp:          # doctest: +SKIP
...     ldp.record("browser", "firefox")        # randomised now, queued, returns at once
...     ldp.record("session_minutes", 12.5)
>>> print(ldp.privacy_report())                               # doctest: +SKIP

``url``, ``api_key`` and ``state_dir`` default to ``LDP_COLLECTOR_URL``,
``LDP_API_KEY`` and ``LDP_STATE_DIR``; without them the state folder is the
platform's per-user one (``client_sdk._config.default_state_dir``).  The URL
must be ``https`` unless it names a loopback host or ``allow_http=True``.

What ``record`` does, in order (none of it touches the network):

1. ``enabled=False``, after ``opt_out()`` or ``close()``: returns at once, collects nothing.
2. Looks the metric up in the spec catalog: the specs bundled with the app
   (``metrics=``: a list of spec JSON objects, or the path of a JSON file as
   ``GET /v1/metrics`` answers), the cache in ``state_dir`` and the collector's
   answer (fetched in the background at start and every ``metrics_ttl``).
   Unknown before this process's first successful fetch: the value is held in
   memory only (``held``; never on disk, at most ``HoldConfig.max_values`` for
   ``max_seconds``) and goes through steps 3-6 when the specs arrive; unknown
   after it: ``unknown_metric``.  A spec changed under its version is
   ``spec_conflict``; one above the device's ``PrivacyCaps`` is
   ``spec_over_cap`` (each logged once at WARNING).
3. ``spec.index_of(value)``: a value outside the domain is ``invalid_value``
   (counted, logged once per metric without the value); a number outside
   [lo, hi] is clamped (counted).  ``strict=True`` raises ``ValueError`` instead.
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

A wrong ingest key (401/403) is a configuration error: logged at ERROR with the
URL and the reason (never the key), counted in ``counters().config_errors``;
the reports stay in the spool and are retried, and ``flush()`` returns False.
So is a token issuer key that the app has not pinned (``issuer_keys``,
``client_sdk._pins``): ``config_errors["issuer_key_unpinned"]``, reports kept.

The ledger charges the mechanism's declared epsilon (an upper bound on the
epsilon its integer thresholds implement), and sums are rounded up.  A unit
is per metric *name*: a new version of a spec shares the budget of its name.
``budgets={"m": 2.0}`` allows two reports per epoch locally, but a token
(one per install and epoch) goes on one report per metric version of its
epoch, so the second is dropped as ``token_limit`` before it leaves.  For
memoised metrics the lifetime ledger charges ``epsilon_inf`` once per
permanent response drawn (per distinct value and mechanism fingerprint,
keyed by an HMAC), and the sum per name is capped: by default at 4 x the
epsilon_inf of the name's first draw on this device (``PrivacyCaps.lifetime_multiple``;
no later spec version moves it), or at ``lifetime_budgets[name]``.  An opt-out
does not reset it.

Any number of Clients and processes may share one ``state_dir`` (a forked
child, a second process of the app): the ledger is the file, so one unit is
spent once whoever asks.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import sqlite3
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from client_sdk._catalog import Catalog, bundle_issuer_keys, load_bundle
from client_sdk._config import Connection, DeliveryConfig, HoldConfig, PrivacyCaps
from client_sdk._device import (
    DeviceState,
    delete_secret,
    load_or_create_secret,
    make_private_dir,
    tighten_files,
)
from client_sdk._hold import Holder
from client_sdk._ledger import SqliteLedger
from client_sdk._pins import IssuerPins
from client_sdk._pipeline import Pipeline
from client_sdk._record import Sampler, build_report, lifetime_budgets_of, record_into
from client_sdk._results import (
    Counters,
    PrivacyReport,
    RecordResult,
)
from client_sdk._store import Store
from client_sdk._transport import KeyGuard, Transport, UrllibTransport, check_url
from ldp_core._rng import Rng
from ldp_core.metric import MetricSpec

__all__ = ["Client"]

log = logging.getLogger("client_sdk")

SECRET_FILE = "device_secret"  # noqa: S105 (a file name)
SPOOL_FILE = "spool.sqlite3"
METRICS_FILE = "metrics.json"
OPT_OUT_FILE = "opted_out"


class Client:
    """The SDK for one device.  Thread-safe and fork-safe; see the module docstring.

    url, api_key      the collector and an ingest key (default: $LDP_COLLECTOR_URL,
                      $LDP_API_KEY); https, or http to loopback, unless allow_http
    state_dir         the SDK's own folder (0700; every file in it 0600): secret, spec
                      cache, spool and ledger (default: $LDP_STATE_DIR, else the
                      platform's per-user state folder); unusable: the Client collects
                      nothing, ``record`` answers ``state_unavailable`` (never raises)
    transport         a ``Transport`` (default: ``UrllibTransport``)
    enabled           False: collect nothing, touch no file, start no thread
    background        False: no sender thread; call ``flush(timeout)`` to send
    delivery          a ``DeliveryConfig`` (batching, retries, quotas, durability)
    sample_rate       probability of keeping a record (one float, or per metric)
    budgets           epsilon per unit for chosen metrics (default: the metric's epsilon)
    lifetime_budgets  cap on the lifetime epsilon of chosen memoised metric names
                      (``math.inf``: no cap; default: 4 x the epsilon_inf of the name's
                      first permanent response on this device, ``caps.lifetime_multiple``)
    caps              ``PrivacyCaps``: specs above them are refused (default: epsilon 4
                      per report, epsilon_inf 8), and the default lifetime multiple
    metrics           the catalog bundled with the app: spec JSON objects, or the path
                      of a JSON file (``{"metrics": [...]}`` as GET /v1/metrics answers,
                      optionally with ``"issuer_keys": [...]``: what
                      ``ldp metric list --json`` writes); a spec that cannot load is
                      logged and counted (``config_errors["bundled_spec_invalid"]``)
    issuer_keys       key ids (SHA-256 hex) of the token issuer keys the app accepts,
                      joined with the bundle's and ``$LDP_ISSUER_KEYS``; a key not
                      pinned is refused (``client_sdk._pins``); none pinned: any key,
                      with one WARNING
    device_token      for an issuer that knows devices by the app's accounts
                      (``LDP_DEVICE_AUTH=jwt``): a callable returning the app's current
                      login token (a JWT), sent with token requests only; raising or
                      returning None is counted (``config_errors``) and retried later
    hold              ``HoldConfig``: values of metrics unknown before the first fetch
    strict            True: ``record`` raises ValueError for a value outside the domain
                      (default: refused as ``invalid_value``, numbers clamped)
    allow_http        True: accept plain http to a host that is not loopback
    clock, rng        for tests only (the device path uses time.time and the OS CSPRNG)
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        api_key: str | None = None,
        state_dir: str | os.PathLike[str] | None = None,
        transport: Transport | None = None,
        enabled: bool = True,
        background: bool = True,
        delivery: DeliveryConfig | None = None,
        sample_rate: float | Mapping[str, float] = 1.0,
        budgets: Mapping[str, float] | None = None,
        lifetime_budgets: Mapping[str, float] | None = None,
        caps: PrivacyCaps | None = None,
        metrics: Iterable[dict[str, Any]] | str | os.PathLike[str] | None = None,
        issuer_keys: Iterable[str] | None = None,
        device_token: Callable[[], str | None] | None = None,
        hold: HoldConfig | None = None,
        strict: bool = False,
        allow_http: bool = False,
        clock: Callable[[], float] = time.time,
        rng: Rng | None = None,
    ) -> None:
        where = Connection.resolve(url, api_key, state_dir)
        check_url(where.url, allow_http=allow_http)
        if device_token is not None and not callable(device_token):
            raise TypeError(f"device_token must be a callable returning the app's login token,"
                            f" got {type(device_token).__name__}")
        pinned = list(issuer_keys or ())
        if isinstance(metrics, str | os.PathLike):
            pinned += bundle_issuer_keys(metrics)
            metrics = load_bundle(metrics)
        pins = IssuerPins.of(pinned)
        self.url = where.url
        self.state_dir = where.state_dir
        self._strict = strict
        self._holder = Holder(
            hold or HoldConfig(), record=self._record_held, count=self._count_refused,
            fetch=self.refresh_metrics,
            retry_delay=lambda n: self.config.backoff_delay(n, lambda a, b: b) + 0.1,
            fetch_timeout=(delivery or DeliveryConfig()).request_timeout)
        self._tally: Counter[str] = Counter()
        self._guard = KeyGuard(transport or UrllibTransport())
        self._caps = caps or PrivacyCaps()
        self._enabled = enabled
        self._sampler = Sampler(sample_rate)
        self._budgets = dict(budgets or {})
        self._lifetime_budgets = lifetime_budgets_of(lifetime_budgets)
        self._clock = clock
        self._rng = rng
        self._closed = False
        self._state_dir = where.state_dir
        self._device: DeviceState | None = None
        self._pipeline: Pipeline | None = None
        self.config = delivery or DeliveryConfig()
        #: Why the state folder could not be used (``None``: it could).
        self._unusable: str | None = None
        if not enabled:
            return
        try:
            store, catalog, secret = self._open_state(metrics)
        except (OSError, sqlite3.Error) as exc:   # StateError is an OSError
            self._state_unavailable(exc)
            return
        catalog.listeners.append(self._holder.release)
        self._pipeline = Pipeline(where.url, where.api_key, store, catalog, self._guard,
                                  self.config, background=background, pins=pins)
        self._pipeline.tokens.clock = clock   # stock of epochs before the clock's is dead
        self._pipeline.tokens.device_token = device_token
        self._ledger = SqliteLedger(store)
        if secret is None:
            self._pipeline.stop()
        else:
            self._start_device(secret)
            if background:
                self._pipeline.kick()

    def _open_state(self, metrics: Iterable[dict[str, Any]] | None
                    ) -> tuple[Store, Catalog, bytes | None]:
        """The state folder opened: spec catalog, spool and ledger, device secret (``None``
        when opted out).  Raises ``OSError``/``sqlite3.Error`` if the folder is unusable."""
        make_private_dir(self._state_dir)
        tighten_files(self._state_dir)
        opted_out = (self._state_dir / OPT_OUT_FILE).exists()
        catalog = Catalog(self._state_dir / METRICS_FILE)
        if metrics is not None:
            catalog.update(metrics, source="bundle")
        store = Store(self._state_dir / SPOOL_FILE, max_reports=self.config.max_reports,
                      max_bytes=self.config.max_bytes)
        try:
            secret = None if opted_out else load_or_create_secret(self._state_dir / SECRET_FILE)
        except BaseException:
            store.close()
            raise
        return store, catalog, secret

    def _state_unavailable(self, exc: BaseException) -> None:
        """The state folder is unusable: collect nothing, say why once (never raise).

        No in-memory fallback: without the folder no ledger and no device secret
        outlive the process, so each restart would spend the metric's budget again
        and draw new permanent responses (memoisation defeated).
        """
        self._unusable = f"{type(exc).__name__}: {exc}"
        log.warning("state_dir %s is unusable (%s): this Client collects nothing and record()"
                    " answers state_unavailable; fix the folder or pass state_dir= (or"
                    " $LDP_STATE_DIR)", self._state_dir, self._unusable)

    def _start_device(self, secret: bytes | None = None) -> None:
        if secret is None:
            secret = load_or_create_secret(self._state_dir / SECRET_FILE)
        self._device = DeviceState(secret, self._ledger)
        if self._pipeline is not None:
            self._pipeline.tokens.default_install = self._device.install

    # -- recording ---------------------------------------------------------------------

    def record(self, metric: str, value: object) -> RecordResult:
        """Randomise ``value`` for ``metric`` and queue only the report.  Never blocks
        on the network and never raises for data or the network (``strict=True``:
        ValueError for a value outside the metric's domain)."""
        pipeline, device = self._pipeline, self._device
        if pipeline is None:
            if self._unusable is not None:
                self._tally["state_unavailable"] += 1
                return RecordResult("state_unavailable", metric)
            return RecordResult("disabled", metric)
        if self._closed:
            return RecordResult("closed", metric)
        if device is None:
            pipeline.refused("opted_out")
            return RecordResult("opted_out", metric)
        now = self._clock()
        if pipeline.catalog.get(metric) is None and self._holder.hold(
                metric, value, now, fetch_soon=pipeline.background):
            return RecordResult("held", metric)
        return self._record_now(metric, value, now, strict=self._strict)

    def _record_held(self, metric: str, value: object, now: float) -> None:
        self._record_now(metric, value, now, strict=False)

    def _count_refused(self, status: str) -> None:
        if self._pipeline is not None:
            self._pipeline.refused(status)

    def _drain_held(self, timeout: float) -> None:
        """flush()/close(): one bounded fetch of the specs if values are held."""
        if self._holder.waiting and self._pipeline is not None and timeout > 0:
            self._pipeline.refresh_metrics(min(timeout, self.config.request_timeout))

    def _record_now(self, metric: str, value: object, now: float, *, strict: bool
                    ) -> RecordResult:
        pipeline, device = self._pipeline, self._device
        if pipeline is None or device is None:
            return RecordResult("disabled" if pipeline is None else "opted_out", metric)
        return record_into(
            pipeline, device, metric, value, sampler=self._sampler, caps=self._caps,
            budgets=self._budgets, lifetime_budgets=self._lifetime_budgets, now=now,
            rng=self._rng, strict=strict, tally=self._tally,
        )

    # -- delivery ----------------------------------------------------------------------

    def flush(self, timeout: float = 10.0) -> bool:
        """Send what is queued (and what is held, once the specs arrive); True if
        nothing is pending or held when it returns.  False at once while the
        collector refuses the api key (the reports are kept)."""
        pipeline = self._pipeline
        if pipeline is None:
            return True
        deadline = time.monotonic() + max(timeout, 0.0)
        self._drain_held(deadline - time.monotonic())
        while True:
            done = pipeline.flush(min(0.25, max(0.0, deadline - time.monotonic())))
            if done or self._guard.rejected or time.monotonic() >= deadline:
                break
        return done and not self._guard.rejected and not self.counters().held

    def close(self, timeout: float = 5.0) -> bool:
        """Flush within ``timeout``, then stop; unsent reports stay in the spool,
        values still held (specs never fetched) are forgotten and counted
        (``refused["hold_dropped"]``).

        True if nothing was left pending; calling it again just answers that again.
        """
        if self._pipeline is None:
            return True
        if not self._closed:
            deadline = time.monotonic() + max(timeout, 0.0)
            self._drain_held(timeout)
            self._holder.drop()
            timeout = max(0.0, deadline - time.monotonic())
        self._closed = True
        return self._pipeline.close(timeout) and not self._guard.rejected

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
        if self._pipeline is None:
            if self._unusable is not None:
                refused = self._tally["state_unavailable"]
                return Counters(refused={"state_unavailable": refused} if refused else {},
                                config_errors={"state_unavailable": 1})
            return Counters()
        held = len(self._holder)
        counts = self._pipeline.counters()
        errors = dict(counts.config_errors)
        if self._guard.rejections:
            errors["invalid_key"] = self._guard.rejections
        return dataclasses.replace(counts, clamped=self._tally["clamped"], held=held,
                                   config_errors=errors)

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
        try:
            os.close(os.open(self._state_dir / OPT_OUT_FILE, os.O_WRONLY | os.O_CREAT, 0o600))
        except OSError as exc:
            log.warning("opt-out not persisted in %s (%s): this process collects nothing,"
                        " a later one would", self._state_dir, exc)
        self._device = None
        self._holder.drop("opt_out")                   # held values: forgotten at once
        self._pipeline.stop()
        self._pipeline.purge("opt_out")
        delete_secret(self._state_dir / SECRET_FILE)

    def opt_in(self) -> None:
        """Collect again, with a new device secret (new tokens, new memoisation).

        New permanent responses are new draws: each is charged to the lifetime
        ledger on top of what was spent before the opt-out."""
        if self._pipeline is None or self._device is not None:
            return
        try:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._state_dir / OPT_OUT_FILE)
            self._start_device()
        except OSError as exc:                      # StateError included
            log.warning("opt-in failed, still opted out: state_dir %s (%s)",
                        self._state_dir, exc)
            return
        self._pipeline.resume()

    def privacy_report(self) -> PrivacyReport:
        """Epsilon spent per unit (device, metric name, epoch) and per memoised lifetime,
        summed over every spec version and every process sharing the state folder
        (opted out or not: what was spent stays on record)."""
        if self._pipeline is None:
            return PrivacyReport((), ())
        return build_report(self._ledger.spend(), self._pipeline.catalog, self._budgets,
                            self._lifetime_budgets, self._caps.lifetime_multiple)

