"""What one device keeps: its secret and its budget ledger; and how a value becomes a report.

The secret (32 bytes from the OS CSPRNG) is the root of three derived values,
none of which reveals another:

- the per-epoch token ``HMAC(secret, metric|version|epoch)`` (``ldp_core.wire``),
- the permanent responses of memoised metrics (``randomize_memoised``),
- the ledger key of a memoised value ``HMAC(secret, "lifetime|metric|version|value")``,
  so the lifetime ledger never holds the value itself.

>>> state = DeviceState(secret=bytes(32))
>>> state.spent_in("browser", 1, 7)
0.0
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import math
import os
import secrets
import stat
import threading
from pathlib import Path
from typing import NamedTuple

from client_sdk._errors import StateError
from client_sdk._store import Row
from ldp_core._rng import Rng
from ldp_core.metric import MetricSpec
from ldp_core.wire import device_token

__all__ = [
    "SECRET_BYTES",
    "DeviceState",
    "Prepared",
    "delete_secret",
    "load_or_create_secret",
    "make_private_dir",
]

SECRET_BYTES = 32
#: Relative slack when comparing a sum of float epsilons with a budget: one report
#: of exactly the budget fits, a second never does.
_BUDGET_SLACK = 1e-9


def load_or_create_secret(path: Path) -> bytes:
    """The device secret at ``path``, created once (0600, CSPRNG) if absent."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        pass
    else:
        try:
            os.write(fd, secrets.token_bytes(SECRET_BYTES))
            os.fsync(fd)
        finally:
            os.close(fd)
    try:
        info = os.stat(path)
        if stat.S_IMODE(info.st_mode) & 0o077:
            os.chmod(path, 0o600)
        with open(path, "rb") as src:
            secret = src.read()
    except OSError as exc:
        raise StateError(f"cannot read the device secret in {path.parent}: {exc}") from None
    if len(secret) != SECRET_BYTES:
        raise StateError(f"device secret {path} is corrupt ({len(secret)} bytes)")
    return secret


def delete_secret(path: Path) -> None:
    """Overwrite, then remove the secret file (opt-out)."""
    with contextlib.suppress(FileNotFoundError):
        with open(path, "r+b") as f:
            f.write(bytes(SECRET_BYTES))
            f.flush()
            os.fsync(f.fileno())
        os.unlink(path)


class Prepared(NamedTuple):
    """A randomised report ready to queue, and what to undo if queueing fails."""

    row: Row
    unit: tuple[str, int, int]
    charge: float
    lifetime: tuple[str, int, str, float] | None


class DeviceState:
    """A secret and an in-memory ledger (a Client also persists it in its Store).

    Thread-safe: budget checks and charges happen under one lock, randomising
    outside it.
    """

    __slots__ = ("_lock", "lifetime_spent", "memo_keys", "reports", "secret", "spent")

    def __init__(self, secret: bytes) -> None:
        self.secret = secret
        self._lock = threading.Lock()
        self.spent: dict[tuple[str, int, int], float] = {}
        self.reports: dict[tuple[str, int, int], int] = {}
        self.memo_keys: set[tuple[str, int, str]] = set()
        self.lifetime_spent: dict[tuple[str, int], float] = {}

    def after_fork(self) -> None:
        self._lock = threading.Lock()

    def spent_in(self, metric: str, version: int, epoch: int) -> float:
        return self.spent.get((metric, version, epoch), 0.0)

    def load(self, units: list[tuple[str, int, int, float, int]],
             lifetime: list[tuple[str, int, str, float]]) -> None:
        """Restore the ledger from the Store at start."""
        for metric, version, epoch, spent, reports in units:
            self.spent[(metric, version, epoch)] = spent
            self.reports[(metric, version, epoch)] = reports
        for metric, version, key, eps_inf in lifetime:
            if (metric, version, key) not in self.memo_keys:
                self.memo_keys.add((metric, version, key))
                total = self.lifetime_spent.get((metric, version), 0.0) + eps_inf
                self.lifetime_spent[(metric, version)] = total

    def forget_memo(self) -> None:
        with self._lock:
            self.memo_keys.clear()
            self.lifetime_spent.clear()

    def prepare(
        self,
        spec: MetricSpec,
        value: int | float,
        epoch: int,
        *,
        budget: float,
        lifetime_budget: float | None,
        persist_charge: bool,
        rng: Rng | None = None,
    ) -> Prepared | str:
        """Charge the ledger and randomise ``value`` (the mechanism input), or a
        refusal status.  The value is used here and nowhere else."""
        m = spec.build()
        charge = m.epsilon
        unit = (spec.name, spec.version, epoch)
        memo: tuple[str, int, str, float] | None = None
        memoised = spec.epsilon_inf is not None
        with self._lock:
            spent = self.spent.get(unit, 0.0)
            if spent + charge > budget * (1 + _BUDGET_SLACK):
                return "over_budget"
            if memoised:
                assert spec.epsilon_inf is not None
                key = self.value_key(spec, value)
                if (spec.name, spec.version, key) not in self.memo_keys:
                    life = self.lifetime_spent.get((spec.name, spec.version), 0.0)
                    if (lifetime_budget is not None
                            and life + spec.epsilon_inf > lifetime_budget * (1 + _BUDGET_SLACK)):
                        return "over_lifetime_budget"
                    memo = (spec.name, spec.version, key, spec.epsilon_inf)
                    self.memo_keys.add((spec.name, spec.version, key))
                    self.lifetime_spent[(spec.name, spec.version)] = life + spec.epsilon_inf
            self.spent[unit] = _add_up(spent, charge)
            self.reports[unit] = self.reports.get(unit, 0) + 1
        try:
            if memoised:
                report = m.randomize_memoised(  # type: ignore[attr-defined]
                    value, secret=self.secret, context=f"{spec.name}|{spec.version}", rng=rng
                )
            else:
                report = m.randomize(value, rng=rng)
            payload = m.encode(report)
        except BaseException:
            self.refund(unit, charge, memo)
            raise
        row = Row(
            os.urandom(16).hex(),                       # report_id: 128 bits, CSPRNG
            spec.name,
            spec.version,
            epoch,
            device_token(self.secret, spec.name, spec.version, epoch),
            payload_text(payload),
            charge if persist_charge else 0.0,
        )
        return Prepared(row, unit, charge, memo)

    def refund(self, unit: tuple[str, int, int], charge: float,
               memo: tuple[str, int, str, float] | None) -> None:
        """Undo a charge whose report was never queued (nothing left the device)."""
        with self._lock:
            left = self.spent.get(unit, 0.0) - charge
            self.spent[unit] = max(left, 0.0)
            self.reports[unit] = max(self.reports.get(unit, 1) - 1, 0)
            if memo is not None:
                metric, version, key, eps_inf = memo
                self.memo_keys.discard((metric, version, key))
                life = self.lifetime_spent.get((metric, version), 0.0) - eps_inf
                self.lifetime_spent[(metric, version)] = max(life, 0.0)

    def value_key(self, spec: MetricSpec, value: int | float) -> str:
        """HMAC(secret, "lifetime|metric|version|value"), hex: the ledger key of a value."""
        message = f"lifetime|{spec.name}|{spec.version}|{value!r}".encode()
        return hmac.new(self.secret, message, hashlib.sha256).hexdigest()


def payload_text(payload: object) -> str:
    """The JSON text of a mechanism's wire payload (int, [int, ...] or base64url str).

    >>> payload_text(3), payload_text([5, 1]), payload_text("AQ")
    ('3', '[5,1]', '"AQ"')
    """
    kind = type(payload)
    if kind is int:
        return str(payload)
    if kind is list and all(type(x) is int for x in payload):  # type: ignore[attr-defined]
        return "[" + ",".join(map(str, payload)) + "]"  # type: ignore[call-overload]
    return json.dumps(payload, separators=(",", ":"))


def _add_up(a: float, b: float) -> float:
    """a + b rounded outward (never below the exact sum)."""
    total = a + b
    return math.nextafter(total, math.inf) if a else total


def make_private_dir(path: Path) -> None:
    """Create ``path`` (0700) if needed; ``StateError`` if it is unusable."""
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise StateError(f"cannot create state_dir {path}: {exc}") from None
    if not path.is_dir():
        raise StateError(f"state_dir {path} is not a directory")
