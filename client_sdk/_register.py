"""Install registration, the device half: one proof of work per install, off the app's thread.

The token issuer signs only for registered installs (``collector.routers.installs``).
``Registrar.ensure(install)`` makes sure an install key is registered, at
most once per process for a key the collector already knows:

1. ``POST /v1/installs`` with no proof: 200 means registered (a restart, or a
   registration made by an earlier process): no work.  Skipped when the issuer
   has just answered 403 ``install_unregistered`` (``unless_unregistered``) or the
   install is known to be new (a simulated fleet's device);
2. else (403 ``install_unregistered``) ``POST /v1/installs/challenge``, then
   ``ldp_core.pow.solve`` in THIS thread (the caller is the SDK's delivery
   thread; ``hashlib.scrypt`` releases the GIL, so the app's threads run on;
   ~1 s of one core at the collector's default difficulty), then
   ``POST /v1/installs`` with the nonce: 201 (or 200) registered.  A challenge
   that expired or that the collector no longer accepts (its secret changed)
   is asked again once.

Nothing is raised into the app: every outcome is a ``Registration``:
``registered``, ``busy`` (network down, 429 or 5xx: try again later, after
``retry_after`` if the collector said) or ``refused`` (a final 4xx, with its
code).  A difficulty beyond ``MAX_MEMORY_BYTES`` or ``MAX_BITS`` is refused
without solving (``pow_too_costly``): a misconfigured or hostile collector
cannot make the device burn its battery.

>>> from client_sdk._transport import Response
>>> class Up:
...     def send(self, method, url, headers, body, timeout):
...         return Response(200, {}, b'{"status": "registered", "day": 20790}')
>>> r = Registrar(Up(), "http://127.0.0.1:1", lambda: {})
>>> r.ensure("A" * 43)
Registration(status='registered', code=None, retry_after=None)
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from client_sdk._transport import Response, Transport
from ldp_core.pow import PowParams, install_digest, solve
from ldp_core.tokens import TokenError, unb64url

__all__ = ["MAX_BITS", "MAX_MEMORY_BYTES", "Registrar", "Registration", "not_yet",
           "unless_unregistered"]

log = logging.getLogger("client_sdk")

#: The most work a device accepts to do: 2^20 evaluations of at most 64 MiB.
MAX_BITS = 20
MAX_MEMORY_BYTES = 64 << 20
#: Challenges asked per ``ensure`` (a second one after an expired or refused challenge).
_ROUNDS = 2
_AGAIN = frozenset({"challenge_expired", "challenge_invalid"})
#: A kept challenge is used while it has this many seconds left (``reuse_challenge``).
_MARGIN = 60.0


@dataclass(frozen=True)
class Registration:
    """What ``Registrar.ensure`` found: registered, busy (retry later) or refused (final)."""

    status: Literal["registered", "busy", "refused"]
    code: str | None = None
    retry_after: float | None = None


_REGISTERED = Registration("registered")


def _code(answer: Response) -> str | None:
    try:
        data = json.loads(answer.body)
    except ValueError:
        return None
    code = data.get("code") if isinstance(data, dict) else None
    return code if isinstance(code, str) and len(code) <= 64 else None


def _not_now(answer: Response) -> Registration:
    """busy (429, 408, 425, 5xx) or refused (any other answer), with the code."""
    status = answer.status
    if status in (408, 425, 429) or status >= 500:
        try:
            wait: float | None = float(answer.header("retry-after") or "")
        except ValueError:
            wait = None
        return Registration("busy", _code(answer) or f"http_{status}", wait)
    return Registration("refused", _code(answer) or f"http_{status}")


class Registrar:
    """Registers install keys with the collector (see the module docstring).

    ``headers`` gives the app's ingest key header; ``solver`` is
    ``ldp_core.pow.solve`` (tests count its calls).  An attempt cut short (a 429, the
    network) resumes where it stopped: the install's challenge and solved nonce are
    kept until they are spent or the challenge expires, so a tight rate limit that
    lets one request through at a time still lets the registration finish, and the
    work is never done twice for one challenge.
    """

    def __init__(self, transport: Transport, url: str, headers: Callable[[], dict[str, str]],
                 *, timeout: float = 10.0,
                 solver: Callable[[bytes, bytes, PowParams], int | None] = solve,
                 reuse_challenge: bool = False, clock: Callable[[], float] = time.time) -> None:
        self.transport, self.url, self._headers = transport, url.rstrip("/"), headers
        self.timeout, self._solver = timeout, solver
        #: A simulated fleet solves every device's proof against one challenge while it
        #: lasts (a challenge may serve many installs: each proof is bound to its install
        #: key): one request per registration instead of two.  A real device never
        #: shares one between installs (that would tie them together).
        self.reuse_challenge, self._clock = reuse_challenge, clock
        self._shared: _Challenge | None = None
        #: install -> (its challenge, the nonce solved for it, or None yet).
        self._proofs: dict[str, tuple[_Challenge, int | None]] = {}
        self._known: set[str] = set()
        self._pending: set[str] = set()
        self._lock = threading.Lock()

    def known(self, install: str) -> bool:
        """Whether this process saw the install registered."""
        with self._lock:
            return install in self._known

    def first(self, install: str) -> bool:
        """Whether to register ``install`` before its next token request: the issuer said it
        is unregistered and the registration has not finished yet, or (``reuse_challenge``,
        a fleet of new installs) the issuer has asked another install to register."""
        with self._lock:
            if install in self._known:
                return False
            return install in self._pending or (self.reuse_challenge and bool(self._known))

    def ensure(self, install: str, *, unregistered: bool = False) -> Registration:
        """Registered, or why not; never raises (network errors are ``busy``).
        ``unregistered``: the issuer has just said so (403 ``install_unregistered``), or
        the install is new: no probe first, the proof is sent at once (a collector that
        knows the install answers 200 without checking it)."""
        if self.known(install):
            return _REGISTERED
        if unregistered:
            with self._lock:
                self._pending.add(install)
        try:
            outcome = self._register(install, probe=not unregistered)
        except (OSError, ValueError, KeyError, TypeError) as exc:  # network, a garbled answer
            log.debug("install registration: %s", type(exc).__name__)
            outcome = Registration("busy", type(exc).__name__)
        if outcome.status == "registered":
            with self._lock:
                self._known.add(install)
                self._pending.discard(install)
                self._proofs.pop(install, None)
        elif outcome.status == "refused":
            log.warning("install registration refused (%s): token requests wait", outcome.code)
        return outcome

    def proof(self, install: str) -> str | Registration:
        """``LDP-Install-Proof`` for ``install`` (``<challenge>.<nonce>``: registered by the
        token request that carries it), or why none now.  The proof is kept until
        ``settled``; the fleet's devices register this way, one request each."""
        try:
            digest = install_digest(unb64url(install))
            got = self._challenge_for(install)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            return Registration("busy", type(exc).__name__)
        solved = self._solved(install, digest, got)
        if isinstance(solved, Registration):
            return solved
        challenge, nonce = solved
        return f"{challenge.text}.{nonce}"

    def settled(self, install: str, answer: Response) -> Response:
        """The token request that carried ``proof`` was answered: 200 registered the
        install; a refused proof (challenge expired or unknown, ``pow_invalid``,
        ``registration_limited``) is dropped, and answered as a 429 so the request is
        asked again later with a new one; any other answer is left as it is."""
        if answer.status == 200:
            with self._lock:
                self._known.add(install)
                self._pending.discard(install)
                self._proofs.pop(install, None)
            return answer
        code = _code(answer)
        if code in _AGAIN or code in ("pow_invalid", "registration_limited"):
            with self._lock:
                kept = self._proofs.pop(install, None)
                if kept is not None and self._shared == kept[0] and code in _AGAIN:
                    self._shared = None
            return not_yet(_not_now(answer) if answer.status == 429
                           else Registration("busy", code), answer.body)
        return answer

    def _post(self, path: str, install: str | None, body: dict[str, object]) -> Response:
        headers = {**self._headers(), "Content-Type": "application/json"}
        if install is not None:
            headers["LDP-Install-Key"] = install
        return self.transport.send("POST", f"{self.url}{path}", headers,
                                   json.dumps(body).encode(), self.timeout)

    def _register(self, install: str, *, probe: bool) -> Registration:
        if probe:
            answer = self._post("/v1/installs", install, {})
            if answer.status in (200, 201):
                return _REGISTERED
            if answer.status != 403 or _code(answer) != "install_unregistered":
                return _not_now(answer)
        try:
            digest = install_digest(unb64url(install))
        except TokenError:
            return Registration("refused", "install_key_invalid")
        for _ in range(_ROUNDS):
            solved = self._solved(install, digest, self._challenge_for(install))
            if isinstance(solved, Registration):
                return solved
            challenge, nonce = solved
            answer = self._post("/v1/installs", install,
                                {"challenge": challenge.text, "nonce": nonce})
            if answer.status in (200, 201):
                return _REGISTERED
            if _code(answer) not in _AGAIN:
                if answer.status not in (408, 425, 429) and answer.status < 500:
                    self._forget(install, challenge)  # a final refusal: not this proof again
                return _not_now(answer)
            self._forget(install, challenge)
        return _not_now(answer)

    def _forget(self, install: str, challenge: _Challenge) -> None:
        with self._lock:
            self._proofs.pop(install, None)
            if self._shared == challenge:
                self._shared = None

    def _solved(self, install: str, digest: bytes,
                got: tuple[_Challenge, int | None] | Registration,
                ) -> tuple[_Challenge, int] | Registration:
        """The challenge of ``got`` with its nonce: solved now (and kept, so a request
        cut short resumes with it) unless already known."""
        if isinstance(got, Registration):
            return got
        challenge, nonce = got
        if nonce is None:
            nonce = self._solver(unb64url(challenge.text), digest, challenge.params)
            if nonce is None:
                return Registration("refused", "pow_unsolved")
            with self._lock:
                self._proofs[install] = (challenge, nonce)
        return challenge, nonce

    def _challenge_for(self, install: str) -> tuple[_Challenge, int | None] | Registration:
        """The install's kept challenge and nonce while the challenge has a minute left
        (else the fleet's shared one, with ``reuse_challenge``), else a new challenge;
        or why none: ``pow_too_costly`` for a difficulty this device refuses."""
        now = self._clock()
        with self._lock:
            kept = self._proofs.get(install)
            if kept is not None and kept[0].expires - now > _MARGIN:
                return kept
            self._proofs.pop(install, None)
            shared = self._shared
        if shared is not None and shared.expires - now > _MARGIN:
            return shared, None
        answer = self._post("/v1/installs/challenge", None, {})
        if answer.status != 200:
            return _not_now(answer)
        data = json.loads(answer.body)
        pow_ = data["pow"]
        params = PowParams(n=int(pow_["n"]), r=int(pow_["r"]), p=int(pow_["p"]),
                           bits=int(pow_["bits"]))
        if pow_.get("alg") != "scrypt" or params.bits > MAX_BITS \
                or params.memory_bytes * params.p > MAX_MEMORY_BYTES:
            return Registration("refused", "pow_too_costly")
        # The collector's expiry, in its clock; a device clock that is off only makes the
        # challenge be asked again (challenge_expired) or kept less long.
        challenge = _Challenge(str(data["challenge"]), params, float(data.get("expires", 0)))
        with self._lock:
            self._proofs[install] = (challenge, None)
            if self.reuse_challenge:
                self._shared = challenge
        return challenge, None


@dataclass(frozen=True)
class _Challenge:
    """A challenge as the collector gave it: its text, difficulty and expiry (unix s)."""

    text: str
    params: PowParams
    expires: float


def unless_unregistered(registrar: Registrar, install: str, answer: Response,
                        again: Callable[[], Response]) -> Response:
    """The issuer's answer, or, if it is 403 ``install_unregistered``, the answer to the
    same request asked again once this install registered (``again``).  A registration
    not done yet answers as a 429 with its Retry-After: the caller's reports wait and the
    request is retried with backoff, never dropped.

    >>> from client_sdk._transport import Response, UrllibTransport
    >>> ok = Response(200, {}, b"{}")
    >>> registrar = Registrar(UrllibTransport(), "http://127.0.0.1:9", dict)
    >>> unless_unregistered(registrar, "k", ok, lambda: ok) is ok   # no registration asked
    True
    """
    if answer.status != 403 or _code(answer) != "install_unregistered":
        return answer
    outcome = registrar.ensure(install, unregistered=True)
    if outcome.status == "registered":
        return again()
    return not_yet(outcome, answer.body)


def not_yet(outcome: Registration, body: bytes) -> Response:
    """A registration not done yet as a 429 (with its Retry-After): the reports wait and the
    token request is asked again with backoff, never dropped.

    >>> not_yet(Registration("busy", "rate_limited", 3.0), b"").headers
    {'retry-after': '3'}
    """
    wait = "" if outcome.retry_after is None else str(int(outcome.retry_after))
    return Response(429, {"retry-after": wait} if wait else {}, body)
