"""Typed dependencies: settings, the store, the analyst check.

The Redis client and the store are owned by the app's lifespan and kept on
``app.state``; routes receive them through these dependencies.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from aggregator.auth import SESSION_COOKIE
from aggregator.sessions import session_valid
from aggregator.settings import Settings
from collector.store import Store
from ldp_server.keys import KeyRing
from ldp_server.problems import Problem

__all__ = [
    "AnalystDep",
    "KeyRingDep",
    "SettingsDep",
    "StoreDep",
    "get_keyring",
    "get_settings",
    "get_store",
    "is_analyst",
    "require_analyst",
]


def get_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


def get_store(request: Request) -> Store:
    store: Store = request.app.state.store
    return store


def get_keyring(request: Request) -> KeyRing:
    ring: KeyRing = request.app.state.keyring
    return ring


SettingsDep = Annotated[Settings, Depends(get_settings)]
StoreDep = Annotated[Store, Depends(get_store)]
KeyRingDep = Annotated[KeyRing, Depends(get_keyring)]


async def is_analyst(request: Request, ring: KeyRing, store: Store) -> bool:
    """A bearer analyst key, or a live dashboard session."""
    if ring.check_bearer(request.headers.get("authorization")):
        return True
    return await session_valid(store.client, request.cookies.get(SESSION_COOKIE))


async def require_analyst(request: Request, ring: KeyRingDep, store: StoreDep) -> None:
    """401 problem+json unless the request carries an analyst key (or session).

    ``missing_key`` when it carries neither a bearer key nor a session cookie,
    ``invalid_key`` when what it carries is not an analyst's (the collector's codes).
    """
    if await is_analyst(request, ring, store):
        return
    challenge = {"WWW-Authenticate": 'Bearer realm="ldp-aggregator"'}
    if request.headers.get("authorization") is None and SESSION_COOKIE not in request.cookies:
        raise Problem(401, "missing_key", "send an analyst key as 'Authorization: Bearer <key>'",
                      headers=challenge)
    raise Problem(401, "invalid_key", "the key is not an analyst key", headers=challenge)


AnalystDep = Annotated[None, Depends(require_analyst)]
