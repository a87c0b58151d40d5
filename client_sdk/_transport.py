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
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

__all__ = ["Response", "Transport", "UrllibTransport"]


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
