"""What one device keeps: its secret and its budget ledger; and how a value becomes a report.

The secret (32 bytes from the OS CSPRNG) is the root of three derived values,
none of which reveals another:

- the install key ``HMAC(secret, "ldp-install-key-v1")`` (base64url) that
  authenticates the device to the token issuer (``client_sdk._tokens``); reports
  carry blind-signed tokens that no one can link to it,
- the permanent responses of memoised metrics (``randomize_memoised``) under the
  context ``memo_context(spec)`` = "<name>|<mechanism fingerprint>": a new spec
  version that keeps the mechanism and its parameters keeps its permanent
  responses, one that changes them draws new ones from a separate stream,
- the ledger key of a memoised value ``HMAC(secret, "lifetime|name|fingerprint|key")``,
  so the lifetime ledger never holds the value itself; the key is the mechanism's
  ``memo_key``: the value, or for the memoised Piecewise mean the grid point the
  device rounds it to (its permanent response, and its lifetime charge, are per point).

>>> from ldp_core.metric import MetricSpec
>>> spec = MetricSpec.from_json({"name": "flag", "kind": "boolean", "epsilon": 1.0})
>>> later = MetricSpec.from_json({"name": "flag", "kind": "boolean", "epsilon": 1.0,
...                               "version": 2, "min_reports": 5})
>>> memo_context(spec) == memo_context(later)     # only descriptive fields changed
True
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import secrets
import stat
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from client_sdk._errors import StateError
from client_sdk._ledger import LIFETIME_MULTIPLE, Ask, Ledger, Refusal
from client_sdk._store import Row
from ldp_core import Memoisable
from ldp_core._rng import Rng
from ldp_core.metric import MetricSpec
from ldp_core.tokens import b64url

__all__ = [
    "SECRET_BYTES",
    "DeviceState",
    "Outcome",
    "delete_secret",
    "load_or_create_secret",
    "make_private_dir",
    "mechanism_fingerprint",
    "memo_context",
    "tighten_files",
]

SECRET_BYTES = 32
#: Fields of ``Mechanism.describe()`` that only restate the channel (bounds computed
#: from it, the request it was solved from).  Every other field, present or future,
#: is part of the fingerprint: an unknown field draws new permanent responses (and
#: charges them) rather than risk two channels sharing one stream.
DESCRIPTIVE = frozenset({"epsilon_actual", "epsilon_inf_actual", "epsilon_requested"})


def mechanism_fingerprint(spec: MetricSpec) -> str:
    """sha256 (hex) of the canonical JSON of the mechanism's parameters.

    The parameters are ``spec.build().describe()`` minus ``DESCRIPTIVE``, plus the
    numeric bounds (``lo``, ``hi``: how a value maps to the mechanism's input).
    Name, version, labels, epoch, unit and ``min_reports`` are not in it.
    """
    params = {k: v for k, v in spec.build().describe().items() if k not in DESCRIPTIVE}
    params["lo"], params["hi"] = spec.lo, spec.hi
    text = json.dumps(params, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()


def memo_context(spec: MetricSpec, fingerprint: str | None = None) -> str:
    """The permanent-response context of a memoised metric: "<name>|<fingerprint>"."""
    return f"{spec.name}|{fingerprint or mechanism_fingerprint(spec)}"


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


class Outcome(NamedTuple):
    """A record's outcome: "queued" with its row, or a refusal status; the epoch charged."""

    status: str
    epoch: int | None
    row: Row | None = None


class DeviceState:
    """A secret and a ledger (on disk for a Client, in memory for a Fleet device)."""

    __slots__ = ("install", "ledger", "secret")

    def __init__(self, secret: bytes, ledger: Ledger) -> None:
        self.secret = secret
        self.ledger = ledger
        #: What the token issuer knows this install by (never sent with a report).
        self.install = b64url(hmac.new(secret, b"ldp-install-key-v1", hashlib.sha256).digest())

    def prepare(
        self,
        spec: MetricSpec,
        fingerprint: str,
        value: int | float,
        now: float,
        *,
        budget: float,
        lifetime_budget: float | None,
        spool: Callable[[Row], None] | None,
        rng: Rng | None = None,
        lifetime_multiple: float = LIFETIME_MULTIPLE,
    ) -> Outcome:
        """Charge the ledger and randomise ``value`` (the mechanism input) in one
        ledger transaction; ``spool`` (if given) stores the row inside it.  The
        value is used here and nowhere else."""
        m = spec.build()
        memoised = spec.epsilon_inf is not None
        key = None
        if memoised:
            assert isinstance(m, Memoisable), spec.name
            point = m.memo_key(value, self.secret, memo_context(spec, fingerprint))
            key = self.value_key(spec.name, fingerprint, point)
        ask = Ask(
            spec.name, spec.version, fingerprint, spec.epoch_seconds, now, m.epsilon, budget,
            key, spec.epsilon_inf or 0.0, lifetime_budget, lifetime_multiple,
        )
        secret = self.secret
        install = self.install

        def make(epoch: int) -> Row:
            if memoised:
                assert isinstance(m, Memoisable), spec.name
                report = m.randomize_memoised(
                    value, secret=secret, context=memo_context(spec, fingerprint), rng=rng
                )
            else:
                report = m.randomize(value, rng=rng)
            row = Row(
                os.urandom(16).hex(),                       # report_id: 128 bits, CSPRNG
                spec.name,
                spec.version,
                epoch,
                "",                                         # token: given before sending
                payload_text(m.encode(report)),
                m.epsilon,
                install,
                spec.epoch,                                 # the token's epoch length
            )
            if spool is not None:
                spool(row)
            return row

        made = self.ledger.charge(ask, make)
        if isinstance(made, Refusal):
            return Outcome(made.status, made.epoch)
        return Outcome("queued", made.epoch, made)

    def value_key(self, metric: str, fingerprint: str, value: int | float) -> str:
        """HMAC(secret, "lifetime|name|fingerprint|key"), hex: the ledger key of one
        permanent response (``value`` is the mechanism's ``memo_key``)."""
        message = f"lifetime|{metric}|{fingerprint}|{value!r}".encode()
        return hmac.new(self.secret, message, hashlib.sha256).hexdigest()


def payload_text(payload: object) -> str:
    """The JSON text of a mechanism's wire payload (int, [int, ...] or base64url str).

    >>> payload_text(3), payload_text([5, 1]), payload_text("AQ")
    ('3', '[5,1]', '"AQ"')
    """
    if type(payload) is int:
        return str(payload)
    if isinstance(payload, list) and all(type(x) is int for x in payload):
        return "[" + ",".join(map(str, payload)) + "]"
    return json.dumps(payload, separators=(",", ":"))


def make_private_dir(path: Path) -> None:
    """Create ``path`` (0700) if needed, or tighten an existing one to 0700;
    ``StateError`` if it is unusable."""
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise StateError(f"cannot create state_dir {path}: {exc}") from None
    if not path.is_dir():
        raise StateError(f"state_dir {path} is not a directory")
    try:
        if stat.S_IMODE(os.stat(path).st_mode) != 0o700:
            os.chmod(path, 0o700)
    except OSError as exc:
        raise StateError(f"cannot make state_dir {path} private (0700): {exc}") from None

def tighten_files(folder: Path) -> None:
    """Every regular file in the SDK's state folder 0600 (older SDKs, copies, backups)."""
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                if entry.is_file(follow_symlinks=False) and (
                        entry.stat(follow_symlinks=False).st_mode & 0o177):
                    os.chmod(entry.path, 0o600)
    except OSError as exc:
        raise StateError(f"cannot make the files of state_dir {folder} private: {exc}") from None
