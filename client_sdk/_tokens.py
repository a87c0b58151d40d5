"""Report tokens on the device: one per epoch, stocked ahead, on every report of it.

A token's unit is an epoch of one length (period "hour" or "day", epoch
index).  A spooled report is sent only with the token of its metric's period
and its epoch: ``TokenManager.ready`` (called by the sender before each claim,
and by ``flush`` when a top-up is due)

1. gives each waiting report the stock token of its unit (one transaction:
   the token is copied into the spool row, so a retry resends the same token
   and the collector answers ``duplicate``, never counting it twice); the
   same token goes on the reports of every metric of that period and epoch
   (the collector spends it once per metric), and stays in the stock while
   its epoch can still get reports;
2. keeps the stock ``ahead`` epochs ahead (the next k epochs of each period
   the install uses) by a *top-up* at a moment drawn (OS CSPRNG) uniformly
   within each epoch and kept in the ``topup`` table, so a restart does not
   redraw it; the top-up is put off by [delay, 2 delay) while a report of the
   install is ready to leave, so it never rides along with a send;
3. after any token request of the install (``POST /v1/tokens``, blind RSA,
   authenticated by its install key), holds its reports for a random
   [delay, 2 delay) (``hold``): the collector never sees a report batch follow
   the install's token request within ``delay`` seconds.  The one exception
   is the install's first epoch (the earliest unit its very first request
   was for): first-run delivery is at once, and that epoch joins nothing;
4. for units still without a token (a new install, a device offline longer
   than k epochs) asks the issuer at once, with the k epochs ahead; one
   request per install: a ``Fleet``'s devices are asked for up to
   ``concurrency`` at once, each with its own install key and blinded messages;
5. keeps the blinded request (nonce, blinded message, unblinding factor) in
   the store *before* sending it, so a lost answer is asked again with the
   same blinded message, which the issuer signs again;
6. deletes stock tokens (and requests) of epochs that are over (before the
   current epoch of ``clock``, the Client's clock) once no report waits for
   them: a new report never has an earlier epoch than the clock's.

``ahead=0`` (a ``Fleet``, a simulation of many devices) asks only for the
units of waiting reports: no stock ahead, no top-up, no hold.

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
>>> 86400 <= draw_in_epoch("day", 1) < 2 * 86400
True
"""

from __future__ import annotations

import logging
import secrets
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


def uniform() -> float:
    """A float in [0, 1) from the OS CSPRNG (the top-up moment, the hold)."""
    return secrets.randbits(53) / (1 << 53)


def draw_in_epoch(period: str, epoch: int) -> float:
    """A moment (unix seconds) drawn uniformly within ``epoch`` of ``period``."""
    seconds = EPOCH_SECONDS[period]
    return (epoch + uniform()) * seconds


class TokenManager(IssuerRoundTrip):
    """See the module docstring; one per Pipeline (thread-safe).

    ``period_of(metric, version)``: the epoch length of a metric (the catalog's),
    needed only for rows spooled by an older SDK, which did not store it.
    """

    FINAL = frozenset({"token_limit", "epoch_expired", "epoch_in_future", "bad_unit",
                       "bad_blinded", "unit_retired", "epoch_v1_only"})

    def __init__(self, store: Store, transport: Transport, url: str,
                 headers: Callable[[], dict[str, str]], *, ahead: int = 2,
                 delay: float = 600.0,
                 pins: IssuerPins | None = None,
                 period_of: Callable[[str, int], str | None] | None = None) -> None:
        self.store = store
        #: The issuer keys the app accepts (none pinned: any, with one WARNING).
        self.pins = pins or IssuerPins(frozenset())
        #: Times an unpinned issuer key was refused (a configuration error).
        self.unpinned = 0
        self._logged_keys: set[str] = set()
        #: Tokens kept for the next ``ahead`` epochs of each period (0, a Fleet: none,
        #: no top-up, no hold).
        self.ahead = int(ahead)
        #: Seconds: after a token request the install's reports wait [delay, 2 delay).
        self.delay = delay
        #: When (``clock``) a top-up or a held report is next due; None: not known yet.
        self.next_due: float | None = None
        self._held_until = float("inf")
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

    def after_fork(self) -> None:
        """In a forked child: fresh locks (a parent thread may have held one)."""
        self._lock = threading.Lock()
        self._count_lock = threading.Lock()
        self.next_due = None

    def config_errors(self) -> dict[str, int]:
        """The configuration errors seen, by kind (``Counters.config_errors``)."""
        return {"issuer_key_unpinned": self.unpinned} if self.unpinned else {}

    def ready(self, timeout: float, *, top_up: bool = False) -> Counter[str]:
        """Tokens onto waiting reports, fetching missing ones; returns reports dropped
        by code (units the issuer refused for good; a second report of one metric
        version in an epoch, ``token_limit``).  ``top_up=True``: only a due top-up."""
        with self._lock:
            self.failed = self.progress = False
            self.failed_answer = None
            self._dropped = Counter()
            try:
                return self._ready(timeout, top_up) + self._dropped
            finally:
                if self._dropped:
                    self.store.remove([])  # recount after the deletes

    def due(self) -> bool:
        """True if ``ready`` has a top-up or a held report to see to now."""
        return bool(self.ahead) and (self.next_due is None or self.next_due <= self.clock())

    def held_for(self) -> float:
        """Seconds until a report held after a token request may go (0: none held)."""
        return max(0.0, self._held_until - self.clock()) if self._held_until < float("inf") \
            else 0.0

    def _ready(self, timeout: float, top_up: bool) -> Counter[str]:
        dropped: Counter[str] = Counter()
        try:
            return self._ready_now(timeout, dropped, top_up)
        finally:
            self._schedule()

    def _ready_now(self, timeout: float, dropped: Counter[str], top_up: bool) -> Counter[str]:
        missing = [] if top_up else self._assign()
        topups = self._due_topups()
        if not missing and not topups:
            return dropped
        try:
            self._fetch(timeout, missing, topups)
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
            self._held_until = float("inf")
            if not waiting:
                return []
            holds: dict[str, float] = {}
            first: dict[tuple[str, str], int] = {}
            for install, period, epoch, hold in conn.execute(
                    "SELECT install, period, first, hold FROM topup") if self.ahead else ():
                holds[install] = max(hold, holds.get(install, hold))
                first[(install, period)] = epoch
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
                hold = holds.get(install, 0.0)
                if now < hold and first.get((install, period)) != epoch:
                    self._held_until = min(self._held_until, hold)  # waits; never dropped
                    continue
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
    def _fetch(self, timeout: float, missing: list[Unit], topups: set[tuple[str, str]]
               ) -> None:
        """Ask for the missing units' tokens and the ``ahead`` epochs of each period
        asked (or due for a top-up): one ``POST /v1/tokens`` per install and
        ``MAX_UNITS`` units, at most ``MAX_REQUESTS`` of them, up to ``concurrency`` at
        once (a Fleet's installs); the reports dropped on the way are counted in
        ``_dropped`` as each answer comes."""
        key = self._public_key(timeout)
        pending = self._pending()
        stocked = self._stocked()
        wanted: dict[str, list[Unit]] = defaultdict(list)
        for unit in missing:
            wanted[unit[0]].append(unit)
        periods = {(i, p) for i, p, _ in missing} | topups if self.ahead else set()
        now = self.clock()
        for install, period in sorted(periods):
            current = int(now // EPOCH_SECONDS[period])
            for epoch in range(current + 1, current + 1 + self.ahead):
                unit = (install, period, epoch)
                if unit not in stocked and unit not in wanted[install]:
                    wanted[install].append(unit)
        for unit in pending:  # asked before, answer lost: ask again, same blinded message
            if unit not in wanted[unit[0]]:
                wanted[unit[0]].append(unit)
        jobs = [(install, units[lo:lo + MAX_UNITS]) for install, units in wanted.items()
                for lo in range(0, len(units), MAX_UNITS) if units][:MAX_REQUESTS]
        if self.ahead:
            self._asking({i for i, _ in jobs}, missing, periods, now)
        asked = set(missing)
        if self.concurrency <= 1 or len(jobs) <= 1:
            for install, units in jobs:
                self._count(self._ask(key, install, units, pending, timeout, asked))
        else:
            self._ask_all(key, jobs, pending, timeout, asked)

    # -- the schedule (``topup``: per install and period) --------------------------------

    def _asking(self, installs: set[str], missing: list[Unit], periods: set[tuple[str, str]],
                now: float) -> None:
        """Before the request goes: hold each asking install's reports for [delay,
        2 delay), and draw the next top-up of each period it asks in the next epoch.
        An install's very first request frees the earliest missing epoch of each
        period (first-run delivery); a later one frees nothing (``first`` -1)."""
        with self.store.transaction() as conn:
            known = {i for (i,) in conn.execute("SELECT DISTINCT install FROM topup")}
            for install in installs:
                hold = now + self.delay * (1.0 + uniform())
                conn.execute("UPDATE topup SET hold = ? WHERE install = ?", (hold, install))
                mine = {p for i, p in periods if i == install}
                for period in sorted(mine):
                    earliest = min((e for i, p, e in missing if (i, p) == (install, period)),
                                   default=-1)
                    next_epoch = int(now // EPOCH_SECONDS[period]) + 1
                    conn.execute(
                        "INSERT INTO topup (install, period, first, due, hold) VALUES"
                        " (?, ?, ?, ?, ?) ON CONFLICT (install, period) DO UPDATE SET"
                        " due = excluded.due, hold = excluded.hold",
                        (install, period, earliest if install not in known else -1,
                         draw_in_epoch(period, next_epoch), hold))

    def _due_topups(self) -> set[tuple[str, str]]:
        """(install, period) of this device whose top-up moment has come and whose
        stock lacks one of the next ``ahead`` epochs.  Put off by [delay, 2 delay)
        while a report of the install is ready to leave; redrawn in the next epoch
        when nothing is missing; rows of other installs (before an opt-out) go."""
        install = self.default_install
        if not self.ahead or install is None:
            return set()
        now = self.clock()
        due: set[tuple[str, str]] = set()
        if not self.store.query("SELECT 1 FROM topup WHERE due <= ? OR install <> ? LIMIT 1",
                                (now, install)):
            return due
        with self.store.transaction() as conn:
            conn.execute("DELETE FROM topup WHERE install <> ?", (install,))
            rows = conn.execute("SELECT period FROM topup WHERE install = ? AND due <= ?"
                                " AND period IN ('hour', 'day')", (install, now)).fetchall()
            if not rows:
                return due
            if conn.execute("SELECT 1 FROM spool WHERE install = ? AND token <> ''"
                            " LIMIT 1", (install,)).fetchone():
                conn.execute("UPDATE topup SET due = ? WHERE install = ? AND due <= ?",
                             (now + self.delay * (1.0 + uniform()), install, now))
                return due
            for (period,) in rows:
                current = int(now // EPOCH_SECONDS[period])
                (have,) = conn.execute(
                    "SELECT COUNT(*) FROM stock WHERE install = ? AND period = ? AND epoch > ?"
                    " AND epoch <= ? AND token IS NOT NULL",
                    (install, period, current, current + self.ahead)).fetchone()
                if have < self.ahead:
                    due.add((install, period))
                else:
                    conn.execute("UPDATE topup SET due = ? WHERE install = ? AND period = ?",
                                 (draw_in_epoch(period, current + 1), install, period))
        return due

    def _schedule(self) -> None:
        """``next_due``: the next top-up moment of this device or held report."""
        if not self.ahead:
            self.next_due = float("inf")
            return
        (due,) = self.store.query("SELECT MIN(due) FROM topup WHERE install = ?",
                                  (self.default_install or "",))[0]
        self.next_due = min(self._held_until, float("inf") if due is None else due)
