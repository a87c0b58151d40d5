"""Report tokens on the device: one per epoch, fetched when online, on every report of it.

A token's unit is an epoch of one length (period "hour" or "day", epoch
index).  A spooled report is sent only with the token of its metric's period
and its epoch: ``TokenManager.ready`` (called by the sender before each claim)

1. gives each waiting report the stock token of its unit (one transaction:
   the token is copied into the spool row, so a retry resends the same token
   and the collector answers ``duplicate``, never counting it twice); the
   same token goes on the reports of every metric of that period and epoch
   (the collector spends it once per metric), and stays in the stock while
   its epoch can still get reports;
2. for units still without one, asks the issuer (``POST /v1/tokens``, blind
   RSA, ``ldp_core.tokens``), authenticated by the device's install key; it
   also asks for the next epoch of each such period, so that the token of a
   report is usually fetched an epoch before it is spent (less timing link
   between issuance and spending, and offline epochs already have tokens);
   one request per install: a ``Fleet``'s devices are asked for up to
   ``concurrency`` at once, each with its own install key and blinded messages;
3. keeps the blinded request (nonce, blinded message, unblinding factor) in
   the store *before* sending it, so a lost answer is asked again with the
   same blinded message, which the issuer signs again;
4. deletes stock tokens (and requests) of epochs that are over (before the
   current epoch of ``clock``, the Client's clock) once no report waits for
   them: a new report never has an earlier epoch than the clock's.

The issuer's key must be pinned by the app (``client_sdk._pins``): a key that
is not is refused before any token is asked with it (``issuer_key_unpinned``,
a configuration error: logged at ERROR once per key, counted in
``unpinned``); the reports wait, and the key is asked again with backoff.

A unit the issuer refuses for good (``token_limit``: this install already got
its token for the epoch; ``epoch_expired`` ...; ``epoch_v1_only``: an epoch
open when the issuer switched from per-metric tokens, which takes only those)
drops its waiting reports, counted in ``dropped`` under that code.  Without
network, reports wait in the spool (bounded by its quotas) until tokens come.

>>> TokenManager.FINAL >= {"token_limit", "epoch_expired"}
True
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable

from client_sdk._catalog import Catalog
from client_sdk._issuer import IssuerRoundTrip, Unit, UnpinnedKey, _Busy, _Refused
from client_sdk._pins import IssuerPins
from client_sdk._store import Store, discard
from client_sdk._transport import Response, Transport
from ldp_core.metric import EPOCH_SECONDS
from ldp_core.tokens import PendingToken, PublicKey, TokenError

__all__ = ["TokenManager", "UnpinnedKey"]

log = logging.getLogger("client_sdk")

#: Units asked in one POST /v1/tokens (the collector's default limit).
MAX_UNITS = 256
#: POST /v1/tokens of one ``ready`` call (the oldest reports' installs first): the
#: rest wait for the next call, so that a fleet of many devices sends the reports
#: that hold tokens in between instead of fetching every device's token first.
#: Not smaller: each call scans every waiting report (``_assign``, about 0.25 s of
#: CPU for 80,000 of them), so a fleet of n devices costs n / MAX_REQUESTS scans.
MAX_REQUESTS = 4096


class TokenManager(IssuerRoundTrip):
    """See the module docstring; one per Pipeline (thread-safe).

    ``period_of(metric, version)``: the epoch length of a metric (the catalog's),
    needed only for rows spooled by an older SDK, which did not store it.
    """

    FINAL = frozenset({"token_limit", "epoch_expired", "epoch_in_future", "bad_unit",
                       "bad_blinded", "unit_retired", "epoch_v1_only"})

    def __init__(self, store: Store, transport: Transport, url: str,
                 headers: Callable[[], dict[str, str]], *, ahead: bool = True,
                 pins: IssuerPins | None = None,
                 period_of: Callable[[str, int], str | None] | None = None) -> None:
        self.store = store
        #: The issuer keys the app accepts (none pinned: any, with one WARNING).
        self.pins = pins or IssuerPins(frozenset())
        #: Times an unpinned issuer key was refused (a configuration error).
        self.unpinned = 0
        self._logged_keys: set[str] = set()
        #: Also ask for the next epoch of each period (a Fleet, a simulation, does not).
        self.ahead = ahead
        self.transport = transport
        self.url = url
        self._headers = headers
        self._period_of = period_of
        #: The clock of the reports' epochs (the Client's): stock of earlier epochs is dead.
        self.clock: Callable[[], float] = time.time
        self._key: PublicKey | None = None
        self._lock = threading.Lock()
        #: True if the last ``ready`` tried to fetch tokens and failed (a retry).
        self.failed = False
        #: The issuer's answer of that failure, if any (429/503: its Retry-After counts).
        self.failed_answer: Response | None = None
        #: True if the last ``ready`` got at least one token (the sender's backoff resets).
        self.progress = False
        #: The install key of rows spooled by an older SDK (no install column then).
        self.default_install: str | None = None
        self._dropped: Counter[str] = Counter()
        self._count_lock = threading.Lock()
        #: Token requests in flight at once, one per install (a Fleet's devices); 1 asks
        #: one after the other.  ``transport.send`` is then called from that many threads.
        self.concurrency = 1

    @classmethod
    def for_catalog(cls, store: Store, transport: Transport, url: str, catalog: Catalog,
                    pins: IssuerPins | None, headers: Callable[[], dict[str, str]]
                    ) -> TokenManager:
        """A Pipeline's manager: rows spooled by an older SDK (no period column) take
        their metric's epoch length from ``catalog``."""
        return cls(store, transport, url, headers, pins=pins,
                   period_of=lambda name, _version: None if (s := catalog.get(name)) is None
                   else s.epoch)

    def config_errors(self) -> dict[str, int]:
        """The configuration errors seen, by kind (``Counters.config_errors``)."""
        return {"issuer_key_unpinned": self.unpinned} if self.unpinned else {}

    def ready(self, timeout: float) -> Counter[str]:
        """Tokens onto waiting reports, fetching missing ones; returns reports dropped
        by code (units the issuer refused for good; a second report of one metric
        version in an epoch, ``token_limit``)."""
        with self._lock:
            self.failed = self.progress = False
            self.failed_answer = None
            self._dropped = Counter()
            try:
                return self._ready(timeout) + self._dropped
            finally:
                if self._dropped:
                    self.store.remove([])  # recount after the deletes

    def _ready(self, timeout: float) -> Counter[str]:
        dropped: Counter[str] = Counter()
        if not self._assign():
            return dropped
        try:
            self._fetch(timeout)
        except UnpinnedKey as exc:
            self.unpinned += 1
            self.failed = True  # reports wait; the key is fetched again with backoff
            if exc.key_id not in self._logged_keys:
                self._logged_keys.add(exc.key_id)
                log.error("token issuer at %s serves key %s, which this app has not"
                          " pinned (issuer_keys) -- configuration error; no token is asked"
                          " or spent with it and reports are kept", self.url, exc.key_id)
            return dropped
        except _Refused as exc:
            log.warning("token issuer refused the request: %s (waiting reports dropped)",
                        exc.code)
            with self.store.transaction() as conn:
                gone = discard(conn, "token = ''", ())
            self.store.remove([])
            return Counter({exc.code: gone})
        except (OSError, ValueError, TokenError, KeyError, TypeError) as exc:
            log.info("tokens not fetched (%s: %s)", type(exc).__name__, exc)
            self.failed = True  # the sender backs off (``Pipeline._retry``)
            self.failed_answer = exc.answer if isinstance(exc, _Busy) else None
            return dropped
        self._assign()
        return dropped

    # -- the store side ------------------------------------------------------------------

    def _assign(self) -> list[Unit]:
        """Copy stock tokens into waiting rows and delete dead stock; the units still
        waiting, oldest first."""
        with self.store.transaction() as conn:
            if self.default_install is not None:
                conn.execute("UPDATE spool SET install = ? WHERE install = ''",
                             (self.default_install,))
            self._name_periods(conn)
            now = self.clock()
            for period, seconds in EPOCH_SECONDS.items():
                conn.execute(
                    "DELETE FROM stock WHERE period = ? AND epoch < ? AND NOT EXISTS (SELECT 1"
                    " FROM spool WHERE spool.token = '' AND spool.install = stock.install AND"
                    " spool.period = stock.period AND spool.epoch = stock.epoch)",
                    (period, int(now // seconds)))
            waiting = conn.execute(
                "SELECT seq, install, period, epoch, metric, version FROM spool WHERE token = ''"
                " AND period IN ('hour', 'day') ORDER BY seq").fetchall()
            if not waiting:
                return []
            stock: dict[Unit, tuple[str, set[str]]] = {
                (i, p, e): (t, set(g.split(",")) - {""}) for i, p, e, t, g in conn.execute(
                    "SELECT install, period, epoch, token, given FROM stock"
                    " WHERE token IS NOT NULL")}
            missing: dict[Unit, None] = {}
            given: list[tuple[str, int]] = []
            again: list[int] = []
            changed: set[Unit] = set()
            for seq, install, period, epoch, metric, version in waiting:
                unit: Unit = (install, period, epoch)
                if unit not in stock:
                    missing[unit] = None
                    continue
                token, spent = stock[unit]
                if f"{metric}:{version}" in spent:
                    again.append(seq)   # the token is this metric's already: one report each
                    continue
                spent.add(f"{metric}:{version}")
                changed.add(unit)
                given.append((token, seq))
            conn.executemany("UPDATE spool SET token = ? WHERE seq = ?", given)
            conn.executemany("UPDATE stock SET given = ? WHERE install = ? AND period = ? AND"
                             " epoch = ?", [(",".join(sorted(stock[u][1])), *u) for u in changed])
            for lo in range(0, len(again), 500):
                chunk = again[lo:lo + 500]
                marks = ",".join("?" * len(chunk))
                self._dropped["token_limit"] += discard(conn, f"seq IN ({marks})", chunk)
        return list(missing)

    def _name_periods(self, conn: sqlite3.Connection) -> None:
        """The period of waiting rows spooled by an older SDK, from the catalog."""
        if self._period_of is None:
            return
        for metric, version in conn.execute(
                "SELECT DISTINCT metric, version FROM spool WHERE period = ''").fetchall():
            period = self._period_of(metric, version)
            if period in EPOCH_SECONDS:
                conn.execute("UPDATE spool SET period = ? WHERE period = '' AND metric = ?"
                             " AND version = ?", (period, metric, version))

    def _pending(self) -> dict[Unit, PendingToken]:
        rows = self.store.query(
            "SELECT install, period, epoch, nonce, blinded, inv FROM stock WHERE token IS NULL")
        return {(i, p, e): PendingToken(p, e, bytes.fromhex(n), bytes.fromhex(b), int(x, 16))
                for i, p, e, n, b, x in rows}

    def _stocked(self) -> set[Unit]:
        return {tuple(r) for r in self.store.query("SELECT install, period, epoch FROM stock")}

    # -- the network side (the round trip itself: ``client_sdk._issuer``) ----------------
    def _fetch(self, timeout: float) -> None:
        """Ask for the missing units' tokens: one ``POST /v1/tokens`` per install and
        ``MAX_UNITS`` units, at most ``MAX_REQUESTS`` of them, up to ``concurrency`` at
        once (a Fleet's installs); the reports dropped on the way are counted in
        ``_dropped`` as each answer comes."""
        missing = self._assign()
        key = self._public_key(timeout)
        pending = self._pending()
        stocked = self._stocked()
        wanted: dict[str, list[Unit]] = defaultdict(list)
        for unit in missing:
            wanted[unit[0]].append(unit)
        for install, units in wanted.items() if self.ahead else ():  # one epoch ahead
            latest: dict[str, int] = {}
            for _, period, epoch in units:
                latest[period] = max(epoch, latest.get(period, epoch))
            for period, epoch in latest.items():
                ahead = (install, period, epoch + 1)
                if ahead not in stocked:
                    units.append(ahead)
        for unit in pending:  # asked before, answer lost: ask again, same blinded message
            if unit not in wanted[unit[0]]:
                wanted[unit[0]].append(unit)
        jobs = [(install, units[lo:lo + MAX_UNITS]) for install, units in wanted.items()
                for lo in range(0, len(units), MAX_UNITS)][:MAX_REQUESTS]
        asked = set(missing)
        if self.concurrency <= 1 or len(jobs) <= 1:
            for install, units in jobs:
                self._count(self._ask(key, install, units, pending, timeout, asked))
        else:
            self._ask_all(key, jobs, pending, timeout, asked)
