"""``Fleet``: many logical devices in one process, for simulations and demos.

A ``Client`` is one device with its own files and thread.  A fleet shares one
spec catalog, one queue and one sender among any number of ``Device`` objects;
a device holds only its secret (32 CSPRNG bytes) and its in-memory ledger
(``client_sdk._ledger.MemoryLedger``: the same rules as a Client's on-disk one,
in one process), so 20,000 of them cost a few MB and record as fast as a Client.

>>> fleet = Fleet("http://127.0.0.1:8000", api_key="k", metrics=[{"name": "browser",
...     "kind": "categorical", "domain": ["a", "b", "c"], "epsilon": 1.0,
...     "mechanism": "grr"}], background=False)
>>> phones = [fleet.device() for _ in range(3)]
>>> [p.record("browser", "b").status for p in phones]
['queued', 'queued', 'queued']
>>> phones[0].record("browser", "c").status          # same epoch: over budget
'over_budget'
>>> fleet.counters().pending
3
>>> fleet.close(0)                                    # nothing listens: stays pending
False

Each device is a different device to the collector: its own tokens and its
own memoisation.  The fleet spool is in memory unless ``state_dir`` is given.
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from client_sdk._catalog import Catalog
from client_sdk._config import DeliveryConfig, PrivacyCaps
from client_sdk._device import SECRET_BYTES, DeviceState, make_private_dir, tighten_files
from client_sdk._errors import ConfigError
from client_sdk._ledger import MemoryLedger
from client_sdk._pins import IssuerPins
from client_sdk._pipeline import Pipeline
from client_sdk._record import Sampler, build_report, lifetime_budgets_of, record_into
from client_sdk._results import Counters, PrivacyReport, RecordResult
from client_sdk._store import Store
from client_sdk._transport import Transport, UrllibTransport
from ldp_core._rng import Rng

__all__ = ["FLEET_DELIVERY", "Device", "Fleet"]

#: A fleet's default: full batches, a memory queue, room for a million reports.
FLEET_DELIVERY = DeliveryConfig(batch_size=1000, durability="batch", max_reports=1_000_000,
                                max_bytes=1 << 30)


class Fleet:
    """Shared catalog, queue and sender for many ``Device`` objects.

    Arguments as for ``Client`` (``background=False`` is typical: record for
    every device, then ``flush(timeout)``); ``state_dir=None`` keeps the spool
    in memory.  ``delivery`` defaults to ``FLEET_DELIVERY``.

    Each device asks the issuer for its own token (``POST /v1/tokens`` with its
    own install key and its own blinded messages: the issuer limits tokens per
    install, so devices cannot share a request).  ``token_concurrency``
    (1 to ``MAX_TOKEN_CONCURRENCY``, default ``TOKEN_CONCURRENCY``) bounds how many
    of those requests are in flight at once, from as many short-lived threads of
    the sender; 1 asks one after the other.  A custom ``transport``
    must then accept ``send`` from several threads at once.

    Each device also registers its install once, paying the collector's proof of
    work (``client_sdk._register``: the issuer signs only for registered installs).
    Once the issuer has asked the first of them (403 ``install_unregistered``), each
    new device sends its proof with its first token request (``LDP-Install-Proof``,
    solved against a challenge the fleet shares while it lasts): no request more.  The work is the
    collector's setting: ``ldp up`` and ``ldp demo`` in dev run with a trivial one
    (``ldp_cli.stack.DEV_POW``), a default collector asks ~1 s of a core per device.
    """

    #: Token requests a fleet has in flight at once by default (``token_concurrency``).
    TOKEN_CONCURRENCY = 8
    #: The most a fleet may have in flight at once.
    MAX_TOKEN_CONCURRENCY = 64

    def __init__(
        self,
        url: str,
        *,
        api_key: str,
        transport: Transport | None = None,
        state_dir: str | os.PathLike[str] | None = None,
        background: bool = True,
        delivery: DeliveryConfig | None = None,
        sample_rate: float | Mapping[str, float] = 1.0,
        budgets: Mapping[str, float] | None = None,
        lifetime_budgets: Mapping[str, float] | None = None,
        caps: PrivacyCaps | None = None,
        metrics: Iterable[dict[str, Any]] | None = None,
        issuer_keys: Iterable[str] | None = None,
        clock: Callable[[], float] = time.time,
        rng: Rng | None = None,
        token_concurrency: int = TOKEN_CONCURRENCY,
    ) -> None:
        if not url.startswith(("http://", "https://")):
            raise ConfigError(f"collector url must start with http:// or https://, got {url!r}")
        if type(token_concurrency) is not int or not \
                1 <= token_concurrency <= self.MAX_TOKEN_CONCURRENCY:
            raise ConfigError(f"token_concurrency must be an int in"
                              f" [1, {self.MAX_TOKEN_CONCURRENCY}], got {token_concurrency!r}")
        self.config = delivery or FLEET_DELIVERY
        self._caps = caps or PrivacyCaps()
        folder = None if state_dir is None else Path(state_dir)
        if folder is not None:
            make_private_dir(folder)
            tighten_files(folder)
        catalog = Catalog(None if folder is None else folder / "metrics.json")
        if metrics is not None:
            catalog.update(metrics, source="bundle")
        store = Store(None if folder is None else folder / "fleet-spool.sqlite3",
                      max_reports=self.config.max_reports, max_bytes=self.config.max_bytes)
        self._pipeline = Pipeline(url, api_key, store, catalog, transport or UrllibTransport(),
                                  self.config, background=background,
                                  pins=IssuerPins.of(issuer_keys))
        self._pipeline.tokens.ahead = False  # simulated devices ask only for what they send
        self._pipeline.tokens.concurrency = token_concurrency
        self._pipeline.tokens.register_first = True  # each device registers its install
        self._pipeline.tokens.clock = clock
        self._sampler = Sampler(sample_rate)
        self._budgets = dict(budgets or {})
        self._lifetime_budgets = lifetime_budgets_of(lifetime_budgets)
        self._clock = clock
        self._rng = rng
        if background:
            self._pipeline.kick()

    def device(self, secret: bytes | None = None) -> Device:
        """A new logical device (a fresh CSPRNG secret unless one is given)."""
        if secret is None:
            secret = secrets.token_bytes(SECRET_BYTES)
        elif len(secret) != SECRET_BYTES:
            raise ConfigError(f"a device secret is {SECRET_BYTES} bytes, got {len(secret)}")
        return Device(self, DeviceState(secret, MemoryLedger()))

    def _record(self, state: DeviceState, metric: str, value: object) -> RecordResult:
        return record_into(
            self._pipeline, state, metric, value, sampler=self._sampler, caps=self._caps,
            budgets=self._budgets, lifetime_budgets=self._lifetime_budgets, now=self._clock(),
            rng=self._rng,
        )

    def _report(self, state: DeviceState) -> PrivacyReport:
        return build_report(state.ledger.spend(), self._pipeline.catalog, self._budgets,
                            self._lifetime_budgets, self._caps.lifetime_multiple)

    def refresh_metrics(self, timeout: float = 2.0) -> bool:
        return self._pipeline.refresh_metrics(timeout)

    def flush(self, timeout: float = 60.0) -> bool:
        return self._pipeline.flush(timeout)

    def close(self, timeout: float = 5.0) -> bool:
        return self._pipeline.close(timeout)

    def counters(self) -> Counters:
        return self._pipeline.counters()

    def __enter__(self) -> Fleet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close(self.config.atexit_timeout)


class Device:
    """One logical device of a ``Fleet``: a secret and a ledger, nothing else."""

    __slots__ = ("_fleet", "_state")

    def __init__(self, fleet: Fleet, state: DeviceState) -> None:
        self._fleet = fleet
        self._state = state

    def record(self, metric: str, value: object) -> RecordResult:
        """As ``Client.record``, for this device."""
        return self._fleet._record(self._state, metric, value)

    def privacy_report(self) -> PrivacyReport:
        return self._fleet._report(self._state)
