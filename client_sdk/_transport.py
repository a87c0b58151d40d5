"""The transport seam: one method that sends an HTTP request and returns the answer.

The SDK talks to the collector only through a ``Transport``.  The default is
``UrllibTransport`` (standard library); tests and simulated fleets may pass
their own object with the same ``send`` method.

>>> t = UrllibTransport()
>>> r = t.send("GET", "http://127.0.0.1:9/v1/metrics", {}, None, 0.5)  # doctest: +SKIP
Traceback (most recent call last):
ConnectionRefusedError: ...

Contract of ``send``:

- it returns a ``Response`` for *every* HTTP answer, 2xx or not (a 503 is a
  ``Response``, not an exception);
- it raises ``OSError`` (``TimeoutError``, ``ConnectionError``,
  ``urllib.error.URLError`` ...) when no HTTP answer arrived;
- it never follows the request to another host and never logs bodies.
"""

from __future__ import annotations

import http.client
import ipaddress
import json
import logging
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from client_sdk._errors import ConfigError

__all__ = ["KeyGuard", "KeyRejected", "Response", "Transport", "UrllibTransport", "check_url"]

log = logging.getLogger("client_sdk")


@dataclass(frozen=True)
class Response:
    """One HTTP answer; header names are lower case."""

    status: int
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes = b""

    def header(self, name: str) -> str | None:
        """A header value by case-insensitive name, or None."""
        return self.headers.get(name.lower())


class Transport(Protocol):
    """What the SDK needs from HTTP.  See the module docstring for the contract."""

    def send(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str],
        body: bytes | None,
        timeout: float,
    ) -> Response: ...


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Redirects are answers, not invitations: the API key stays with one host."""

    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


@dataclass(frozen=True)
class UrllibTransport:
    """The default transport: ``urllib.request``, no redirects.

    ``use_env_proxies=False`` ignores ``http_proxy``/``https_proxy`` (the default
    honours them, as most apps expect).
    """

    use_env_proxies: bool = True
    _opener: urllib.request.OpenerDirector = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        handlers: list[urllib.request.BaseHandler] = [_NoRedirect()]
        if not self.use_env_proxies:
            handlers.append(urllib.request.ProxyHandler({}))
        object.__setattr__(self, "_opener", urllib.request.build_opener(*handlers))

    def send(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str],
        body: bytes | None,
        timeout: float,
    ) -> Response:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"collector URL must be http(s), got {url!r}")
        request = urllib.request.Request(  # noqa: S310 (scheme checked above)
            url, data=body, headers=dict(headers), method=method
        )
        try:
            with self._opener.open(request, timeout=timeout) as answer:
                return Response(answer.status, _lower(answer.headers.items()), answer.read())
        except urllib.error.HTTPError as exc:
            with exc:
                payload = exc.read()
            return Response(exc.code, _lower(exc.headers.items()), payload)
        except http.client.HTTPException as exc:  # a garbled answer is a network failure
            raise ConnectionError(f"bad HTTP answer: {type(exc).__name__}") from None


def _lower(items: Iterable[tuple[str, str]]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in items}


def is_loopback(host: str) -> bool:
    """True for ``localhost``, 127.0.0.0/8 and ::1.

    >>> is_loopback("127.0.0.2"), is_loopback("::1"), is_loopback("localhost")
    (True, True, True)
    >>> is_loopback("10.0.0.1"), is_loopback("collector.example")
    (False, False)
    """
    if host.lower() in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_url(url: str, *, allow_http: bool = False) -> str:
    """The collector URL, checked: ``https``, or ``http`` to a loopback host, or any
    ``http`` with ``allow_http=True`` (an ingest key and reports in clear text).

    >>> check_url("https://collector.example/")
    'https://collector.example/'
    >>> check_url("http://127.0.0.1:8000")
    'http://127.0.0.1:8000'
    >>> check_url("http://collector.example")
    Traceback (most recent call last):
    client_sdk._errors.ConfigError: collector url 'http://collector.example' is plain http to \
a host that is not loopback: use https, or pass allow_http=True
    """
    if not isinstance(url, str):
        raise ConfigError(f"collector url must be a string, got {url!r}")
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"collector url must be http(s)://host..., got {url!r}")
    if parts.scheme == "http" and not allow_http and not is_loopback(parts.hostname):
        raise ConfigError(f"collector url {url!r} is plain http to a host that is not"
                          " loopback: use https, or pass allow_http=True")
    return url


class KeyRejected(ConnectionError):
    """The collector refused the API key (401/403): raised by ``KeyGuard`` so that the
    sender keeps the reports and retries with backoff instead of dropping them."""


class KeyGuard:
    """A ``Transport`` around another that turns a 401/403 into ``KeyRejected``.

    A wrong or revoked ingest key is a configuration error, not a property of the
    reports: they stay in the spool (retried with backoff) until the key works.
    (A 401 ``invalid_device`` to a request with the app's login token is not about
    the key: it is returned as it is.)
    Each rejection is counted (``rejections``); the first one, and each change of
    reason, is logged at ERROR with the URL and the reason (never the key).

    >>> inner = type("T", (), {"send": lambda self, *a: Response(401, {},
    ...     b'{"code": "invalid_key"}')})()
    >>> guard = KeyGuard(inner)
    >>> guard.send("GET", "http://127.0.0.1:9/v1/metrics", {}, None, 1.0)
    Traceback (most recent call last):
    client_sdk._transport.KeyRejected: http://127.0.0.1:9/v1/metrics: 401 invalid_key
    >>> guard.rejections, guard.rejected
    (1, True)
    """

    def __init__(self, inner: Transport) -> None:
        self.inner = inner
        self.rejections = 0
        #: True from a 401/403 until the next answer that is not one.
        self.rejected = False
        self._logged: str | None = None
        self._lock = threading.Lock()

    def send(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str],
        body: bytes | None,
        timeout: float,
    ) -> Response:
        answer = self.inner.send(method, url, headers, body, timeout)
        if answer.status not in (401, 403):
            self.rejected = False
            return answer
        if "LDP-Device-Token" in headers and _code(answer.body) == "invalid_device":
            return answer  # the app's login token, not the key: ``client_sdk._issuer`` counts it
        if answer.status == 403 and _code(answer.body) == "install_unregistered":
            return answer  # not the key: ``client_sdk._register`` registers the install
        reason = f"{answer.status} {_code(answer.body) or 'no reason given'}"
        with self._lock:
            self.rejections += 1
            self.rejected = True
            first, self._logged = self._logged != reason, reason
        if first:
            log.error("collector at %s refused the api key: %s -- configuration error;"
                      " reports are kept and retried until the key works", url, reason)
        raise KeyRejected(f"{url}: {reason}")


def _code(body: bytes) -> str | None:
    """The ``code`` of a problem+json body, if it is a short identifier."""
    try:
        data: Any = json.loads(body)
    except (ValueError, TypeError):
        return None
    code = data.get("code") if isinstance(data, dict) else None
    if isinstance(code, str) and code.replace("_", "").isalnum() and len(code) <= 64:
        return code
    return None
