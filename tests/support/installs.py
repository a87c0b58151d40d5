"""Registering installs for raw-HTTP tests: the proof of work the token issuer asks first.

The token issuer signs only for registered installs (``LDP_INSTALL_REGISTRATION_REQUIRED``,
on by default; ``collector.routers.installs``).  Test collectors run with ``CHEAP_POW``
(``collector_env``, ``tests.collector.test_api.settings``), so a registration is two
requests and microseconds of scrypt; the real difficulty is tested in
tests/collector/test_installs.py.

>>> CHEAP_POW["LDP_INSTALL_POW_BITS"], CHEAP_SETTINGS["install_pow_bits"]
('0', 0)
"""

from __future__ import annotations

from typing import Any

import httpx

from ldp_core.pow import PowParams, install_digest, solve
from ldp_core.tokens import unb64url

__all__ = ["CHEAP_POW", "CHEAP_SETTINGS", "register", "register_async"]

#: The proof of work of every test collector unless a test sets its own: no zero bits,
#: a 2 KiB scrypt (dev only: prod refuses 0 bits).
CHEAP_POW = {"LDP_INSTALL_POW_N": "16", "LDP_INSTALL_POW_R": "1", "LDP_INSTALL_POW_BITS": "0"}
CHEAP_SETTINGS: dict[str, Any] = {"install_pow_n": 16, "install_pow_r": 1, "install_pow_bits": 0}


def _params(body: dict[str, Any]) -> PowParams:
    p = body["pow"]
    assert p["alg"] == "scrypt", p
    return PowParams(n=p["n"], r=p["r"], p=p["p"], bits=p["bits"])


def _proof(challenge: dict[str, Any], install: str) -> dict[str, Any]:
    nonce = solve(unb64url(challenge["challenge"]), install_digest(unb64url(install)),
                  _params(challenge))
    assert nonce is not None
    return {"challenge": challenge["challenge"], "nonce": nonce}


def register(url: str, headers: dict[str, str], install: str,
             extra: dict[str, str] | None = None) -> int:
    """Register ``install`` (its base64url ``LDP-Install-Key``) with the collector at ``url``
    (``headers``: the ingest key; ``extra``: e.g. an X-Forwarded-For); its HTTP status."""
    sent = {**headers, **(extra or {})}
    r = httpx.post(f"{url}/v1/installs/challenge", headers=sent, timeout=30)
    assert r.status_code == 200, r.text
    r = httpx.post(f"{url}/v1/installs", headers={**sent, "LDP-Install-Key": install},
                   json=_proof(r.json(), install), timeout=30)
    assert r.status_code in (200, 201), r.text
    return r.status_code


async def register_async(client: httpx.AsyncClient, headers: dict[str, str],
                         install: str) -> int:
    """``register`` through an (in-process) async client."""
    r = await client.post("/v1/installs/challenge", headers=headers)
    assert r.status_code == 200, r.text
    r = await client.post("/v1/installs", headers={**headers, "LDP-Install-Key": install},
                          json=_proof(r.json(), install))
    assert r.status_code in (200, 201), r.text
    return r.status_code
