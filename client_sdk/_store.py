"""The durable spool and the budget ledger: one sqlite3 file in WAL mode.

Tables (nothing in them is a true value, an IP address or a device id):

- ``spool``: every randomised report not yet acknowledged by the collector,
  oldest first, with a lease so that two processes sharing the file (a fork,
  a restart after a crash) never send the same row at the same time.  Re-sends
  after a crash are harmless: the collector counts a report_id once.
- ``budget``: epsilon spent per (metric name, epoch): the unit of privacy is the
  name, whatever the spec version.
- ``lifetime``: for memoised (longitudinal) metrics, one row per permanent
  response ever drawn, keyed by an HMAC of (mechanism fingerprint, value) under
  the device secret, with its epsilon_inf.  Kept across opt-out.
- ``lifetime_first``: per memoised name, the epsilon_inf of its first draw (the
  anchor of its default lifetime budget, ``client_sdk._ledger.lifetime_cap``).
- ``names``: per metric name, the start (unix seconds) of the latest epoch
  charged: epochs never move backwards, whatever the wall clock says.
- ``versions``: the mechanism fingerprint each (name, version) had when it was
  first charged: a spec changed under its version is refused.
- ``stock``: report tokens (``client_sdk._tokens``), one per install key and
  unit (epoch length ``period``, epoch): asked for (nonce, blinded message and
  unblinding factor, ``token`` NULL) or in stock (``token`` set).  A stock
  token is copied into one spool row per metric version of its unit (``given``
  lists them, "name:version,..."), in one transaction; it stays in the stock
  until its epoch is over and no report waits for it.

A spool row is sent only once it holds a token (``token`` <> ''); ``install``
is the per-install key (derived from the device secret) that asks for it,
``period`` its metric's epoch length ("hour" or "day"; in rows of an older
SDK, '' until the catalog names it, or "v1" if it holds a version-1 token).

``client_sdk._ledger.SqliteLedger`` reads and charges them in one
``BEGIN IMMEDIATE`` transaction (with the spooled report, in durability
"record"), so two Clients, a forked child or another process never spend one
unit twice.  Every file is created 0600.  ``secure_delete`` is on, so purged
rows are overwritten on disk.  Needs sqlite >= 3.24 (upsert); Python's bundled
sqlite has had it since 2018.

>>> s = Store(None, max_reports=2, max_bytes=10**6)
>>> s.write([Row("a" * 32, "m", 1, 7, "t" * 64, "1", 1.0)])
0
>>> s.pending()
1
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import stat
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from client_sdk._discard import discard, refund
from client_sdk._errors import StateError
from client_sdk._schema import upgrade

__all__ = ["Claimed", "Row", "Store", "discard", "private_file"]

_INSERT = (
    "INSERT INTO spool (report_id, metric, version, epoch, token, payload, charge, install,"
    " period, size) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
#: Fixed per-row overhead counted against the byte quota (ids, token, keys).
ROW_OVERHEAD = 140


class Row(NamedTuple):
    """A report as spooled: the envelope fields, payload as JSON text, and its charge.

    (A named tuple, immutable like a frozen dataclass and cheaper on the record path.)
    """

    report_id: str
    metric: str
    version: int
    epoch: int
    token: str
    payload: str
    charge: float
    install: str = ""
    period: str = ""

    @property
    def size(self) -> int:
        return ROW_OVERHEAD + len(self.metric) + len(self.payload)


@dataclass(frozen=True)
class Claimed:
    """A spooled report leased to this process for one delivery attempt."""

    seq: int
    report_id: str
    metric: str
    version: int
    epoch: int
    token: str
    payload: str


class Store:
    """The spool and ledger of one state directory (``path=None``: in memory)."""

    def __init__(self, path: Path | None, *, max_reports: int, max_bytes: int) -> None:
        self.path = path
        self.max_reports = max_reports
        self.max_bytes = max_bytes
        self._lock = threading.RLock()
        self._conn = self._connect()
        self._count = 0
        self._bytes = 0
        self._resync()
        self._release_dead_leases()

    def _connect(self) -> sqlite3.Connection:
        target = ":memory:" if self.path is None else str(self.path)
        if self.path is not None:
            _tighten(self.path)
        conn = sqlite3.connect(target, isolation_level=None, check_same_thread=False, timeout=10.0)
        # Small pages: a commit writes a few 1 KiB WAL frames instead of 4 KiB ones
        # (only takes effect when the file is created).
        conn.execute("PRAGMA page_size=1024")
        if self.path is not None:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA secure_delete=ON")
        try:
            upgrade(conn, target)
        except BaseException:
            conn.close()
            raise
        return conn

    def reopen_after_fork(self) -> None:
        """In a forked child: a connection of its own (an in-memory store starts empty).

        The inherited connection is never used or closed in the child (sqlite
        forbids both); it is parked so that garbage collection cannot close it.
        """
        _ORPHANS.append(self._conn)
        self._lock = threading.RLock()
        self._conn = self._connect()
        self._resync()

    # -- writing ---------------------------------------------------------------------

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """``BEGIN IMMEDIATE`` ... ``COMMIT`` (``ROLLBACK`` on any exception), holding this
        Store's lock: the write lock of the file, against every other connection."""
        with self._lock:
            conn = self._conn
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise

    def insert(self, row: Row) -> None:
        """Spool one row (inside ``transaction()`` it commits with it); then ``added``."""
        with self._lock:
            self._conn.execute(_INSERT, _values(row))

    def added(self, rows: Sequence[Row]) -> int:
        """Account for committed rows; returns how many old reports the quotas dropped."""
        with self._lock:
            self._count += len(rows)
            self._bytes += sum(r.size for r in rows)
            if self._count > self.max_reports or self._bytes > self.max_bytes:
                return self._trim()
            return 0

    def write(self, rows: Sequence[Row]) -> int:
        """Spool ``rows`` in one transaction; returns how many old reports the quotas
        dropped.  If the rows cannot be written, their charges are given back and the
        error is raised."""
        with self._lock:
            try:
                if len(rows) == 1:
                    self._conn.execute(_INSERT, _values(rows[0]))
                else:
                    with self.transaction() as conn:
                        conn.executemany(_INSERT, [_values(r) for r in rows])
            except BaseException:
                # Not written, so never to be sent: their charges go back.  (A failure
                # after the commit, in the quota trim, must not refund rows now spooled.)
                self._refund_all(rows)
                raise
            return self.added(rows)

    def query(self, sql: str, params: Sequence[object] = ()) -> list[tuple[Any, ...]]:
        """Rows of one read statement (the ledger's reports)."""
        with self._lock:
            return list(self._conn.execute(sql, params).fetchall())

    def _trim(self) -> int:
        self._resync()
        over_n = self._count - self.max_reports
        over_b = self._bytes - self.max_bytes
        if over_n <= 0 and over_b <= 0:
            return 0
        dropped, freed, last = 0, 0, -1
        for seq, size in self._conn.execute("SELECT seq, size FROM spool ORDER BY seq"):
            if dropped >= over_n and freed >= over_b:
                break
            dropped, freed, last = dropped + 1, freed + size, seq
        with self.transaction() as conn:
            discard(conn, "seq <= ?", (last,))
        self._resync()
        return dropped

    def _refund_all(self, rows: Sequence[Row]) -> None:
        """Give back the charges of reports that were never written (their spool write
        failed); best effort: if the file cannot be written they stay charged."""
        with contextlib.suppress(sqlite3.Error, OSError), self.transaction() as conn:
            for row in rows:
                refund(conn, row.metric, row.epoch, row.charge)

    # -- delivering ------------------------------------------------------------------

    def claim(self, limit: int, lease_seconds: float) -> list[Claimed]:
        """Lease up to ``limit`` of the oldest unleased reports (one transaction;
        no ``RETURNING``, so sqlite older than 3.35 works too)."""
        now = time.time()
        with self._lock:
            self._resync()
            conn = self._conn
            conn.execute("BEGIN IMMEDIATE")
            try:
                rows = conn.execute(
                    "SELECT seq, report_id, metric, version, epoch, token, payload FROM spool"
                    " WHERE lease_until < ? AND token <> '' ORDER BY seq LIMIT ?", (now, limit),
                ).fetchall()
                for chunk in _chunks([r[0] for r in rows]):
                    marks = ",".join("?" * len(chunk))
                    conn.execute(
                        f"UPDATE spool SET lease_until = ?, lease_pid = ?"  # noqa: S608
                        f" WHERE seq IN ({marks})", (now + lease_seconds, os.getpid(), *chunk),
                    )
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        return [Claimed(*r) for r in rows]

    def release(self, seqs: Iterable[int]) -> None:
        """Give leased reports back for a later attempt."""
        with self._lock:
            for chunk in _chunks(list(seqs)):
                marks = ",".join("?" * len(chunk))
                self._conn.execute(
                    f"UPDATE spool SET lease_until = 0 WHERE seq IN ({marks})", chunk  # noqa: S608
                )

    def remove(self, seqs: Iterable[int]) -> None:
        """Forget reports the collector answered for (accepted, duplicate or final)."""
        with self._lock:
            conn = self._conn
            conn.execute("BEGIN IMMEDIATE")
            try:
                for chunk in _chunks(list(seqs)):
                    marks = ",".join("?" * len(chunk))
                    conn.execute(f"DELETE FROM spool WHERE seq IN ({marks})", chunk)  # noqa: S608
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            self._resync()

    def pending(self) -> int:
        """Reports in the spool (this process's view, exact after each claim)."""
        return self._count

    def unleased(self) -> int:
        """Reports ready to send now: not leased, and holding a token."""
        with self._lock:
            (n,) = self._conn.execute(
                "SELECT COUNT(*) FROM spool WHERE lease_until < ? AND token <> ''",
                (time.time(),),
            ).fetchone()
        return int(n)

    # -- purging ---------------------------------------------------------------------

    def purge(self) -> int:
        """Delete every spooled report; returns how many.  The ledger stays: it holds
        epsilon spent and HMAC keys, no value, and an opt-out must not reset it."""
        with self._lock:
            self._resync()
            dropped = self._count
            self._conn.execute("DELETE FROM spool")
            if self.path is not None:
                self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                _tighten(self.path)
            self._resync()
            return dropped

    def close(self) -> None:
        with self._lock, contextlib.suppress(sqlite3.Error):
            self._conn.close()

    # -- internals -------------------------------------------------------------------

    def _resync(self) -> None:
        count, size = self._conn.execute(
            "SELECT COUNT(*), COALESCE(SUM(size), 0) FROM spool"
        ).fetchone()
        self._count, self._bytes = int(count), int(size)

    def _release_dead_leases(self) -> None:
        with self._lock:
            pids = [p for (p,) in self._conn.execute(
                "SELECT DISTINCT lease_pid FROM spool WHERE lease_until > 0"
            )]
            for pid in pids:
                if pid != os.getpid() and not _alive(pid):
                    self._conn.execute(
                        "UPDATE spool SET lease_until = 0 WHERE lease_pid = ?", (pid,)
                    )


def private_file(path: Path) -> None:
    """Create ``path`` empty (0600) if absent, else make it 0600."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        if stat.S_IMODE(os.fstat(fd).st_mode) != 0o600:
            os.fchmod(fd, 0o600)
    finally:
        os.close(fd)


def _tighten(db: Path) -> None:
    """The database file 0600 (created so if new), and its -wal/-shm if they exist
    (sqlite creates them with the database file's mode)."""
    try:
        private_file(db)
        for suffix in ("-wal", "-shm", "-journal"):
            with contextlib.suppress(FileNotFoundError):
                os.chmod(f"{db}{suffix}", 0o600)
    except OSError as exc:
        raise StateError(f"cannot secure {db}: {exc}") from None


def _values(row: Row) -> tuple[object, ...]:
    return (*row, row.size)


def _chunks(items: list[int], size: int = 500) -> list[list[int]]:
    """Parameter lists short enough for any sqlite build (999 variables at least)."""
    return [items[i:i + size] for i in range(0, len(items), size)]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


#: Connections inherited across fork: never touched again (see ``reopen_after_fork``).
_ORPHANS: list[sqlite3.Connection] = []
