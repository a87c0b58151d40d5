"""Dropping spooled reports that nobody saw: their epsilon and their token's use come back.

>>> import sqlite3
>>> conn = sqlite3.connect(":memory:")
>>> _ = conn.execute("CREATE TABLE budget (metric, epoch, spent, reports)")
>>> _ = conn.execute("INSERT INTO budget VALUES ('m', 7, 2.0, 2)")
>>> refund(conn, "m", 7, 1.0)
>>> conn.execute("SELECT spent, reports FROM budget").fetchall()
[(1.0, 1)]
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Sequence
from fractions import Fraction

__all__ = ["discard", "refund"]


def discard(conn: sqlite3.Connection, where: str, params: Sequence[object]) -> int:
    """Delete the spooled reports ``where`` selects (inside a transaction); returns how many.

    A report that never left the device (never leased for a delivery attempt,
    ``lease_pid = 0``) gives its epsilon back to its (name, epoch) and its
    metric version's use of its token (``stock.given``): nobody saw it, so
    neither was spent.  The token itself is one of its epoch, shared with the
    device's other reports of that epoch: it goes back to the stock only if it
    is unused (no other report holds it) and the stock has none for the epoch
    (it normally still has it: a stock token stays while its epoch can get
    reports).  A report that may have been sent keeps both.  The
    lifetime charge of a memoised value is never given back: its permanent
    response stays drawn.
    """
    rows = conn.execute(
        f"SELECT metric, version, epoch, charge, lease_pid, token, install, period"  # noqa: S608
        f" FROM spool WHERE {where}", params).fetchall()
    conn.execute(f"DELETE FROM spool WHERE {where}", params)  # noqa: S608
    for metric, version, epoch, charge, lease_pid, token, install, period in rows:
        if lease_pid:
            continue
        refund(conn, metric, epoch, charge)
        if not token or period not in ("hour", "day"):
            continue
        unit = (install, period, epoch)
        found = conn.execute("SELECT given FROM stock WHERE install = ? AND period = ? AND"
                             " epoch = ? AND token = ?", (*unit, token)).fetchone()
        if found is not None:
            left = set(found[0].split(",")) - {"", f"{metric}:{version}"}
            conn.execute("UPDATE stock SET given = ? WHERE install = ? AND period = ? AND"
                         " epoch = ?", (",".join(sorted(left)), *unit))
        elif conn.execute("SELECT 1 FROM spool WHERE token = ? LIMIT 1", (token,)).fetchone() \
                is None:
            conn.execute(
                "INSERT OR IGNORE INTO stock (install, period, epoch, nonce, blinded, inv, token)"
                " VALUES (?, ?, ?, '', '', '', ?)", (*unit, token))
    return len(rows)


def refund(conn: sqlite3.Connection, metric: str, epoch: int, charge: float) -> None:
    """One report's epsilon off its (name, epoch), rounded outward (never below the
    exact sum of the charges that remain)."""
    found = conn.execute("SELECT spent, reports FROM budget WHERE metric = ? AND epoch = ?",
                         (metric, epoch)).fetchone()
    if found is None:
        return
    spent, reports = float(found[0]), int(found[1])
    exact = Fraction(spent) - Fraction(charge)
    left = float(exact)
    if Fraction(left) < exact:
        left = math.nextafter(left, math.inf)
    left = 0.0 if reports <= 1 else max(0.0, left)
    conn.execute("UPDATE budget SET spent = ?, reports = ? WHERE metric = ? AND epoch = ?",
                 (left, max(reports - 1, 0), metric, epoch))
