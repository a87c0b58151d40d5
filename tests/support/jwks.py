"""A local identity provider for tests: real keys, a JWKS over HTTP, signed login tokens.

``IdentityProvider`` holds RSA and EC signing keys (``cryptography``), serves
their public JWKS at ``url`` from a stdlib HTTP server thread on 127.0.0.1
(counting the fetches), and signs JWTs with PyJWT, as an app's OIDC provider
would.  ``forged`` makes the tokens an attacker would try (``alg: none``,
HS256 keyed with the public key), which PyJWT refuses to produce itself.

>>> with IdentityProvider.start() as idp:                       # doctest: +SKIP
...     token = idp.token("user-1")                              # RS256, kid "rsa-1"
...     idp.url                                                  # http://127.0.0.1:<port>/jwks
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

__all__ = ["AUDIENCE", "ISSUER", "IdentityProvider", "SigningKey", "b64"]

ISSUER = "https://idp.test.invalid"
AUDIENCE = "ldp-test-app"

PrivateKey = rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@dataclass(frozen=True)
class SigningKey:
    """A private key, its kid and alg."""

    kid: str
    alg: str
    private: PrivateKey

    @classmethod
    def rsa(cls, kid: str, alg: str = "RS256") -> SigningKey:
        return cls(kid, alg, rsa.generate_private_key(public_exponent=65537, key_size=2048))

    @classmethod
    def ec(cls, kid: str) -> SigningKey:
        return cls(kid, "ES256", ec.generate_private_key(ec.SECP256R1()))

    def jwk(self) -> dict[str, Any]:
        public = self.private.public_key()
        if isinstance(public, rsa.RSAPublicKey):
            data = RSAAlgorithm.to_jwk(public, as_dict=True)
        else:
            data = ECAlgorithm.to_jwk(public, as_dict=True)
        return {**data, "kid": self.kid, "use": "sig", "alg": self.alg}

    def public_pem(self) -> bytes:
        return self.private.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


@dataclass
class IdentityProvider:
    """Signing keys and their JWKS over HTTP (``url``); ``published`` are the keys served."""

    keys: dict[str, SigningKey]
    published: list[str]
    url: str = ""
    fetches: int = 0
    _server: ThreadingHTTPServer | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @classmethod
    @contextmanager
    def start(cls) -> Iterator[IdentityProvider]:
        """RSA key "rsa-1" and EC key "ec-1", both published, served on a free port."""
        keys = {k.kid: k for k in (SigningKey.rsa("rsa-1"), SigningKey.ec("ec-1"))}
        idp = cls(keys, list(keys))
        idp._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(idp))
        idp.url = f"http://127.0.0.1:{idp._server.server_address[1]}/jwks"
        thread = threading.Thread(target=idp._server.serve_forever, daemon=True)
        thread.start()
        try:
            yield idp
        finally:
            idp._server.shutdown()
            idp._server.server_close()
            thread.join(5)

    def jwks(self) -> dict[str, Any]:
        with self._lock:
            return {"keys": [self.keys[k].jwk() for k in self.published]}

    def publish(self, key: SigningKey) -> None:
        """Add a key to the JWKS (a rotation)."""
        with self._lock:
            self.keys[key.kid] = key
            self.published.append(key.kid)

    def claims(self, subject: str, **over: Any) -> dict[str, Any]:
        """iss, aud, sub, iat, exp (an hour) with ``over`` on top (None: left out)."""
        now = int(time.time())
        claims = {"iss": ISSUER, "aud": AUDIENCE, "sub": subject, "iat": now,
                  "exp": now + 3600, **over}
        return {k: v for k, v in claims.items() if v is not None}

    def token(self, subject: str, kid: str = "rsa-1", *, header: dict[str, Any] | None = None,
              key: SigningKey | None = None, **over: Any) -> str:
        """A JWT for ``subject`` signed by ``kid``'s key (or ``key``, with kid's header)."""
        signer = key or self.keys[kid]
        claims = self.claims(subject, **over)
        return jwt.encode(claims, signer.private, algorithm=signer.alg,
                          headers={"kid": kid, **(header or {})})

    def forged(self, subject: str, alg: str, kid: str = "rsa-1") -> str:
        """A token with ``alg`` "none" (no signature) or "HS256" keyed by kid's public PEM."""
        head = b64(json.dumps({"alg": alg, "typ": "JWT", "kid": kid}).encode())
        body = b64(json.dumps(self.claims(subject)).encode())
        signing_input = f"{head}.{body}".encode()
        if alg == "none":
            return f"{head}.{body}."
        mac = hmac.new(self.keys[kid].public_pem(), signing_input, hashlib.sha256).digest()
        return f"{head}.{body}.{b64(mac)}"


def _handler(idp: IdentityProvider) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            with idp._lock:
                idp.fetches += 1
            body = json.dumps(idp.jwks()).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    return Handler
