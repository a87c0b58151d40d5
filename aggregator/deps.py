"""Typed dependencies: settings, the store, the analyst check.

The Redis client and the store are owned by the app's lifespan and kept on
``app.state``; routes receive them through these dependencies.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from aggregator.auth import SESSION_COOKIE, KeyRing
from aggregator.problems import Problem
from aggregator.settings import Settings
from collector.store import Store

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


def is_analyst(request: Request, ring: KeyRing) -> bool:
    """A bearer analyst key, or the dashboard's session cookie."""
    return ring.check_bearer(request.headers.get("authorization")) or ring.check_session(
        request.cookies.get(SESSION_COOKIE)
    )


def require_analyst(request: Request, ring: KeyRingDep) -> None:
    """401 problem+json unless the request carries an analyst key."""
    if not is_analyst(request, ring):
        raise Problem(
            401,
            "unauthorized",
            "send an analyst key as 'Authorization: Bearer <key>'",
            headers={"WWW-Authenticate": 'Bearer realm="ldp-aggregator"'},
        )


AnalystDep = Annotated[None, Depends(require_analyst)]
