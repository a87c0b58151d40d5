"""The state file's schema: the spool and the ledger, and its one upgrade path.

>>> SCHEMA_VERSION
6
"""

from __future__ import annotations

import sqlite3

from client_sdk._errors import StateError

__all__ = ["SCHEMA_VERSION", "upgrade"]

SCHEMA_VERSION = 6

_SCHEMA = """
CREATE TABLE IF NOT EXISTS spool (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    report_id TEXT NOT NULL,
    metric TEXT NOT NULL,
    version INTEGER NOT NULL,
    epoch INTEGER NOT NULL,
    token TEXT NOT NULL,
    payload TEXT NOT NULL,
    charge REAL NOT NULL,
    size INTEGER NOT NULL,
    lease_until REAL NOT NULL DEFAULT 0,
    lease_pid INTEGER NOT NULL DEFAULT 0,
    install TEXT NOT NULL DEFAULT '',
    period TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS stock (
    install TEXT NOT NULL,
    period TEXT NOT NULL,
    epoch INTEGER NOT NULL,
    nonce TEXT NOT NULL,
    blinded TEXT NOT NULL,
    inv TEXT NOT NULL,
    token TEXT,
    given TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (install, period, epoch)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS topup (
    install TEXT NOT NULL,
    period TEXT NOT NULL,
    first INTEGER NOT NULL,
    due REAL NOT NULL,
    hold REAL NOT NULL,
    PRIMARY KEY (install, period)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS budget (
    metric TEXT NOT NULL,
    epoch INTEGER NOT NULL,
    spent REAL NOT NULL,
    reports INTEGER NOT NULL,
    PRIMARY KEY (metric, epoch)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS lifetime (
    metric TEXT NOT NULL,
    value_key TEXT NOT NULL,
    epsilon_inf REAL NOT NULL,
    PRIMARY KEY (metric, value_key)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS lifetime_first (
    metric TEXT PRIMARY KEY,
    epsilon_inf REAL NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS names (
    metric TEXT PRIMARY KEY,
    high_water REAL NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS versions (
    metric TEXT NOT NULL,
    version INTEGER NOT NULL,
    fingerprint TEXT NOT NULL,
    PRIMARY KEY (metric, version)
) WITHOUT ROWID;
"""

#: Schema 1 (ledger and lifetime keyed by version, a trigger charging on insert) to 2.
#: Charges move to the name; old lifetime keys stay charged (their permanent responses
#: were drawn under the old context, so a value memoised before is drawn, and charged,
#: anew); the per-name high-water mark starts unknown (0).
_MIGRATE_1 = """
DROP TRIGGER IF EXISTS charge_ledger;
INSERT INTO budget (metric, epoch, spent, reports)
    SELECT metric, epoch, SUM(spent), SUM(reports) FROM ledger GROUP BY metric, epoch;
DROP TABLE ledger;
ALTER TABLE lifetime RENAME TO lifetime_v1;
CREATE TABLE lifetime (
    metric TEXT NOT NULL,
    value_key TEXT NOT NULL,
    epsilon_inf REAL NOT NULL,
    PRIMARY KEY (metric, value_key)
) WITHOUT ROWID;
INSERT OR IGNORE INTO lifetime SELECT metric, value_key, epsilon_inf FROM lifetime_v1;
DROP TABLE lifetime_v1;
"""

#: Schema 2 to 3: rows wait for a blind-signed token (``client_sdk._tokens``); the
#: old HMAC tokens are void, so spooled rows lose theirs and get one like new rows.
_MIGRATE_2 = """
ALTER TABLE spool ADD COLUMN install TEXT NOT NULL DEFAULT '';
UPDATE spool SET token = '';
"""

#: Schema 3 to 4: one token per (install, epoch length, epoch) instead of per (install,
#: metric, version, epoch).  The old stock and pending requests (version-1 tokens) are
#: dropped: waiting reports ask for a version-2 token instead (the issuer's limit on
#: those is fresh).  Rows that already hold a version-1 token keep it: the collector
#: accepts it during the transition.  ``period`` of old rows is filled in from the
#: catalog by ``client_sdk._tokens`` (it is not in the file); rows holding a version-1
#: token get period "v1": their token is never returned to the stock of an epoch.
_MIGRATE_3 = """
ALTER TABLE spool ADD COLUMN period TEXT NOT NULL DEFAULT '';
UPDATE spool SET period = 'v1' WHERE token <> '';
DROP TABLE IF EXISTS tokens;
"""

#: Schema 5 to 6: the epsilon_inf of each memoised name's first draw (the anchor of
#: its default lifetime budget, ``client_sdk._ledger.lifetime_cap``).  Older files did
#: not record which draw came first: the smallest one stands in (never a larger cap).
_MIGRATE_5 = """
INSERT OR IGNORE INTO lifetime_first (metric, epsilon_inf)
    SELECT metric, MIN(epsilon_inf) FROM lifetime GROUP BY metric;
"""


def upgrade(conn: sqlite3.Connection, target: str) -> None:
    """Create or migrate the schema, once, whoever else opens the file meanwhile."""
    (version,) = conn.execute("PRAGMA user_version").fetchone()
    if version == SCHEMA_VERSION:
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        (version,) = conn.execute("PRAGMA user_version").fetchone()
        if version > SCHEMA_VERSION:
            raise StateError(f"{target} was written by a newer SDK (schema {version})")
        for statement in _statements(_SCHEMA):
            conn.execute(statement)
        if version == 1:
            for statement in _statements(_MIGRATE_1):
                conn.execute(statement)
        if version in (1, 2):
            for statement in _statements(_MIGRATE_2):
                conn.execute(statement)
        if version in (1, 2, 3):
            for statement in _statements(_MIGRATE_3):
                conn.execute(statement)
        if 1 <= version <= 5:
            for statement in _statements(_MIGRATE_5):
                conn.execute(statement)
        conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def _statements(script: str) -> list[str]:
    return [x.strip() for x in script.split(";") if x.strip()]
