"""The issuer round trip of the device's report tokens (``client_sdk._tokens``).

``IssuerRoundTrip`` holds the HTTP half of ``TokenManager``: the issuer's public
key (``GET /v1/tokens/key``, refused with ``UnpinnedKey`` unless the app pinned
it), and ``POST /v1/tokens`` for the units of one install (``_ask``), or of many
installs from up to ``concurrency`` threads at once (``_ask_all``).  The blinded
request is kept in the store before it is sent, so a lost answer is asked again
with the same blinded message.  An answer is checked by ``_check``: 200 goes on,
a final 4xx raises ``_Refused`` with the issuer's code, anything else ``_Busy``
(a retry, its Retry-After honoured by the sender).

>>> sorted(_RETRYABLE)
[408, 425, 429]
"""

from __future__ import annotations

import json
import logging
import threading
from collections import Counter
from collections.abc import Callable
from typing import ClassVar

from client_sdk._pins import IssuerPins
from client_sdk._store import Store, discard
from client_sdk._transport import Response, Transport
from ldp_core.tokens import PendingToken, PublicKey, b64url, prepare, unb64url, wire_token

__all__ = ["IssuerRoundTrip", "Unit", "UnpinnedKey"]

#: Answers worth asking again (then with backoff); any other 4xx is final.
_RETRYABLE = frozenset({408, 425, 429})


class _Refused(Exception):
    """The issuer refused the request for good (a wrong key, a bad request)."""

    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code


class UnpinnedKey(ValueError):
    """The issuer served a key whose id the app has not pinned."""

    def __init__(self, key_id: str) -> None:
        super().__init__(f"issuer key {key_id} is not pinned")
        self.key_id = key_id


class _Busy(ValueError):
    """A retryable answer (429, 503 ...): its Retry-After is honoured by the sender."""

    def __init__(self, answer: Response, message: str) -> None:
        super().__init__(message)
        self.answer = answer


def _check(answer: Response, what: str) -> None:
    status = answer.status
    if status == 200:
        return
    if 400 <= status < 500 and status not in _RETRYABLE:
        code = None
        try:
            data = json.loads(answer.body)
            code = data.get("code") if isinstance(data, dict) else None
        except ValueError:
            pass
        raise _Refused(code if isinstance(code, str) and len(code) <= 64 else f"http_{status}")
    raise _Busy(answer, f"{what} answered {status}")


log = logging.getLogger("client_sdk")

Unit = tuple[str, str, int]  # install, period, epoch


class IssuerRoundTrip:
    """The issuer side of ``TokenManager`` (its base class); the attributes are the
    manager's, set by its ``__init__``."""

    FINAL: ClassVar[frozenset[str]]
    store: Store
    transport: Transport
    url: str
    pins: IssuerPins
    progress: bool
    concurrency: int
    _headers: Callable[[], dict[str, str]]
    _key: PublicKey | None
    _logged_keys: set[str]
    _dropped: Counter[str]
    _count_lock: threading.Lock

    def _public_key(self, timeout: float) -> PublicKey:
        if self._key is None:
            answer = self.transport.send("GET", f"{self.url}/v1/tokens/key", self._headers(),
                                         None, timeout)
            _check(answer, "GET /v1/tokens/key")
            key = PublicKey.from_json(json.loads(answer.body))
            key_id = key.key_id.hex()
            if not self.pins.allows(key_id):
                raise UnpinnedKey(key_id)
            if not self.pins.enforced and key_id not in self._logged_keys:
                self._logged_keys.add(key_id)
                log.warning("token issuer key %s accepted without a pin: pin it (issuer_keys)"
                            " so that an issuer cannot give this device a key of its own",
                            key_id)
            self._key = key
        return self._key

    def _count(self, dropped: Counter[str]) -> None:
        if dropped:
            with self._count_lock:
                self._dropped.update(dropped)

    def _ask_all(self, key: PublicKey, jobs: list[tuple[str, list[Unit]]],
                 pending: dict[Unit, PendingToken], timeout: float, missing: set[Unit]) -> None:
        """``_ask`` every job from at most ``concurrency`` threads; the first failure
        stops the asking (requests in flight end) and is raised, as in one thread."""
        todo = iter(jobs)
        lock = threading.Lock()
        errors: list[Exception] = []

        def work() -> None:
            while True:
                with lock:
                    job = None if errors else next(todo, None)
                if job is None:
                    return
                try:
                    self._count(self._ask(key, job[0], job[1], pending, timeout, missing))
                except Exception as exc:  # raised in the sender's thread below
                    with lock:
                        errors.append(exc)
                    return

        threads = [threading.Thread(target=work, name="ldp-telemetry-tokens", daemon=True)
                   for _ in range(min(self.concurrency, len(jobs)))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if errors:
            raise errors[0]

    def _ask(self, key: PublicKey, install: str, units: list[Unit],
             pending: dict[Unit, PendingToken], timeout: float,
             missing: set[Unit]) -> Counter[str]:
        """One ``POST /v1/tokens`` for ``units`` of one install; the reports dropped."""
        fresh = [(u, prepare(key, u[1], u[2])) for u in units if u not in pending]
        if fresh:  # kept before asking: a lost answer is asked again, same blinded message
            with self.store.transaction() as conn:
                conn.executemany(
                    "INSERT OR IGNORE INTO stock (install, period, epoch, nonce, blinded, inv,"
                    " token) VALUES (?, ?, ?, ?, ?, ?, NULL)",
                    [(*u, p.nonce.hex(), p.blinded.hex(), format(p.inv, "x")) for u, p in fresh])
        made = dict(fresh)
        chunk = [(u, pending[u] if u in pending else made[u]) for u in units]
        body = json.dumps({"units": [
            {"period": p.period, "epoch": p.epoch, "blinded": b64url(p.blinded)}
            for _, p in chunk]}).encode()
        headers = {**self._headers(), "Content-Type": "application/json",
                   "LDP-Install-Key": install}
        answer = self.transport.send("POST", f"{self.url}/v1/tokens", headers, body, timeout)
        _check(answer, "POST /v1/tokens")
        results = json.loads(answer.body)["results"]
        if len(results) != len(chunk):
            raise ValueError("POST /v1/tokens answered another number of results")
        dropped: Counter[str] = Counter()
        with self.store.transaction() as conn:
            for (unit, p), result in zip(chunk, results, strict=True):
                where = (*unit, p.nonce.hex())
                if result.get("status") == "issued":
                    token = wire_token(key, p, unb64url(result["blind_sig"]))
                    self.progress = True
                    conn.execute("UPDATE stock SET token = ? WHERE install = ? AND period = ?"
                                 " AND epoch = ? AND nonce = ?", (token, *where))
                elif result.get("code") in self.FINAL:
                    conn.execute("DELETE FROM stock WHERE install = ? AND period = ? AND"
                                 " epoch = ? AND nonce = ?", where)
                    if unit in missing:
                        gone = discard(conn, "token = '' AND install = ? AND period = ?"
                                       " AND epoch = ?", unit)
                        dropped[str(result["code"])] += gone
        if dropped:
            self.store.remove([])  # recount after the deletes
        return dropped
