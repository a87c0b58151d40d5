"""The issuer round trip of the device's report tokens (``client_sdk._tokens``).

``IssuerRoundTrip`` holds the HTTP half of ``TokenManager``: the issuer's public
key (``GET /v1/tokens/key``, refused with ``UnpinnedKey`` unless the app pinned
it), and ``POST /v1/tokens`` for the units of one install (``_ask``), or of many
installs from up to ``concurrency`` threads at once (``_ask_all``).  The blinded
request is kept in the store before it is sent, so a lost answer is asked again
with the same blinded message.  An answer is checked by ``_check``: 200 goes on,
a final 4xx raises ``_Refused`` with the issuer's code, anything else ``_Busy``
(a retry, its Retry-After honoured by the sender).

An app with accounts whose issuer checks them (``LDP_DEVICE_AUTH=jwt``) gives
``Client(device_token=...)``: a callable returning the app's current login
token (a JWT), sent as ``LDP-Device-Token`` with ``POST /v1/tokens`` only
(never with a report).  If it raises or returns no token, nothing is asked
(``device_token_unavailable``); if the issuer refuses the token (401
``invalid_device``, e.g. expired), ``device_token_refused``: either way the
reports wait and the request is retried with backoff, nothing is raised into
the app.

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
from client_sdk._register import Registrar, not_yet, unless_unregistered
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


class _NoDeviceToken(ValueError):
    """The app's ``device_token`` callable raised or gave no token: nothing is asked."""


class _Busy(ValueError):
    """A retryable answer (429, 503 ...): its Retry-After is honoured by the sender."""

    def __init__(self, answer: Response, message: str) -> None:
        super().__init__(message)
        self.answer = answer


def _problem(answer: Response) -> tuple[str | None, str | None]:
    """(code, reason) of a problem+json answer; None where absent or not short text."""
    try:
        data = json.loads(answer.body)
    except ValueError:
        return None, None
    if not isinstance(data, dict):
        return None, None
    code, reason = data.get("code"), data.get("reason")
    return (code if isinstance(code, str) and len(code) <= 64 else None,
            reason if isinstance(reason, str) and len(reason) <= 64 else None)


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
    #: The app's login token for the issuer (``Client(device_token=...)``); None: not sent.
    device_token: Callable[[], str | None] | None = None
    #: Token requests not sent because ``device_token`` raised or gave no token.
    device_token_unavailable = 0
    #: Token requests whose device token the issuer refused (401 invalid_device).
    device_token_refused = 0
    #: Registers this device's installs when the issuer asks (``client_sdk._register``).
    registrar: Registrar | None = None
    #: A simulated fleet (``Fleet``): every install is new, so once the issuer has asked
    #: one of them to register, each sends its proof with its first token request
    #: (``LDP-Install-Proof``, on a shared challenge) instead of after a 403.
    register_first = False

    def device_token_errors(self) -> dict[str, int]:
        """The device-token failures seen, by kind (``Counters.config_errors``)."""
        return {k: v for k, v in (("device_token_unavailable", self.device_token_unavailable),
                                  ("device_token_refused", self.device_token_refused)) if v}

    def _login_token(self) -> dict[str, str]:
        """The ``LDP-Device-Token`` header ({} without ``device_token``); raises
        ``_NoDeviceToken`` (counted) when the app's callable raises or gives none."""
        if self.device_token is None:
            return {}
        why = "returned no token"
        try:
            token = self.device_token()
        except Exception as exc:  # the app's code: never raised into the app
            token, why = None, f"raised {type(exc).__name__}"
        if not isinstance(token, str) or not token.strip() or not token.isprintable():
            with self._count_lock:
                self.device_token_unavailable += 1
                first = self.device_token_unavailable == 1
            # Once at WARNING (a signed-out app retries with backoff for as long as it is).
            log.log(logging.WARNING if first else logging.DEBUG,
                    "device_token %s: no token request now, reports kept", why)
            raise _NoDeviceToken(f"device_token {why}")
        return {"LDP-Device-Token": token.strip()}

    def _registrar(self) -> Registrar:
        if self.registrar is None:
            self.registrar = Registrar(self.transport, self.url, self._headers,
                                       reuse_challenge=self.register_first)
        return self.registrar

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
        login = self._login_token()
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
                   "LDP-Install-Key": install, **login}
        def send() -> Response:
            return self.transport.send("POST", f"{self.url}/v1/tokens", headers, body, timeout)

        # An issuer that requires registration (issue 34): the proof of work, once, here
        # in the delivery thread, then the same request again (client_sdk._register).  A
        # fleet's new device sends its proof with its first token request instead.
        registrar = self._registrar()
        first = registrar.first(install)
        if first and self.register_first:
            proof = registrar.proof(install)
            if isinstance(proof, str):
                headers["LDP-Install-Proof"] = proof
                answer = registrar.settled(install, send())
                del headers["LDP-Install-Proof"]
            else:
                answer = not_yet(proof, b"")
        elif first:
            early = registrar.ensure(install, unregistered=True)
            answer = unless_unregistered(registrar, install, send(), send) \
                if early.status == "registered" else not_yet(early, b"")
        else:
            answer = unless_unregistered(registrar, install, send(), send)
        if login and answer.status == 401 and _problem(answer)[0] == "invalid_device":
            with self._count_lock:
                self.device_token_refused += 1
                first = self.device_token_refused == 1
            reason = _problem(answer)[1] or "?"
            log.log(logging.WARNING if first else logging.DEBUG,
                    "token issuer refused the device token (%s): reports kept, asked again"
                    " later with the token device_token then gives", reason)
            raise _Busy(answer, f"POST /v1/tokens: device token refused ({reason})")
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
