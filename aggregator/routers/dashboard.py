"""GET / : the dashboard page (server-rendered SVG), its sign-in and stylesheet.

How the key reaches the page: it never does, and it is never in a URL.  The
analyst signs in with the form (POST /login from this origin, key in the
body) or with a one-time ticket link (``GET /login?ticket=...``, minted by an
analyst key through ``POST /v1/sessions``: ``ldp up`` prints one); either way
the answer is a redirect to ``/`` that sets an HttpOnly, SameSite=Strict
cookie holding a random session id kept in Redis (``aggregator.sessions``),
revoked by POST /logout.  ``/?key=`` signs nobody in.  ``Authorization:
Bearer`` works too.  The access log redacts query strings.
"""

from __future__ import annotations

from importlib.resources import files
from typing import Annotated
from urllib.parse import parse_qs

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from aggregator.auth import SESSION_COOKIE
from aggregator.deps import AnalystDep, KeyRingDep, SettingsDep, StoreDep, is_analyst
from aggregator.page import login_page, metrics_page
from aggregator.service import estimate_response
from aggregator.sessions import (
    SESSION_SECONDS,
    TICKET_SECONDS,
    close_session,
    mint_ticket,
    open_session,
    redeem_ticket,
    same_origin,
)
from aggregator.settings import Settings
from aggregator.views import EstimateOptions
from collector.store import Store

__all__ = ["MAX_METRICS", "SERIES_POINTS", "router"]

router = APIRouter(tags=["dashboard"])

#: Most metrics drawn on one page, and most epochs per series chart.
MAX_METRICS = 50
SERIES_POINTS = 60
_MAX_LOGIN_BODY = 4096


async def _signed_in(settings: Settings, store: Store) -> RedirectResponse:
    response = RedirectResponse("/", status_code=303)
    response.set_cookie(
        SESSION_COOKIE,
        await open_session(store.client),
        max_age=SESSION_SECONDS,
        httponly=True,
        samesite="strict",
        secure=settings.secure_cookies,
        path="/",
    )
    return response


def _login(message: str) -> HTMLResponse:
    return HTMLResponse(login_page(message), status_code=401)


@router.get("/", response_class=HTMLResponse)
async def dashboard(
    request: Request,
    ring: KeyRingDep,
    settings: SettingsDep,
    store: StoreDep,
    key: Annotated[str | None, Query(max_length=512)] = None,
    start: Annotated[int | None, Query(ge=0)] = None,
    end: Annotated[int | None, Query(ge=1)] = None,
    confidence: Annotated[float, Query(gt=0.5, lt=1.0)] = 0.95,
) -> Response:
    """The metrics with their estimates; sign-in page without a valid key."""
    if key is not None:  # a key in a URL lands in histories and logs: never accepted
        return _login("Keys never go in a URL: sign in with the form.")
    if not await is_analyst(request, ring, store):
        return _login("Sign in with an analyst key.")
    bodies = []
    options = EstimateOptions(confidence)
    for spec in (await store.list_metrics())[:MAX_METRICS]:
        body = await estimate_response(
            store,
            spec,
            start=start,
            end=end,
            options=options,
            series=True,
            max_epochs=settings.max_epochs,
        )
        body["series"] = body["series"][-SERIES_POINTS:]
        bodies.append(body)
    return HTMLResponse(metrics_page(bodies), headers={"Cache-Control": "no-store"})


@router.get("/login")
async def login_with_ticket(
    settings: SettingsDep, store: StoreDep,
    ticket: Annotated[str | None, Query(max_length=128)] = None,
) -> Response:
    """A one-time ticket link (``POST /v1/sessions``) signs this browser in."""
    if not await redeem_ticket(store.client, ticket):
        return _login("That sign-in link is used or expired.")
    return await _signed_in(settings, store)


@router.post("/v1/sessions", status_code=201)
async def mint_sign_in_link(_: AnalystDep, store: StoreDep) -> dict[str, object]:
    """A one-time link (good for a minute) that signs a browser in without a key."""
    ticket = await mint_ticket(store.client)
    return {"path": f"/login?ticket={ticket}", "expires_in": TICKET_SECONDS}


@router.post("/login")
async def login(
    request: Request, ring: KeyRingDep, settings: SettingsDep, store: StoreDep
) -> Response:
    """The form's POST from this origin: a urlencoded ``key`` field (bounded body)."""
    if not same_origin(request):
        return HTMLResponse(login_page("Sign in from the dashboard's own page."),
                            status_code=403)
    # Read at most 4 KiB: request.body() would hold any body the client sends in memory.
    too_large = HTMLResponse(login_page("Request too large."), status_code=413)
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > _MAX_LOGIN_BODY):
        return too_large
    raw = b""
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > _MAX_LOGIN_BODY:
            return too_large
    key = (parse_qs(raw.decode(errors="replace")).get("key") or [""])[0]
    if not key or not ring.check_key(key):
        return _login("That key is not an analyst key.")
    return await _signed_in(settings, store)


@router.post("/logout")
async def logout(request: Request, store: StoreDep) -> Response:
    """Revoke this browser's session (from this origin only) and drop its cookie."""
    if not same_origin(request):
        return HTMLResponse(login_page("Sign out from the dashboard's own page."),
                            status_code=403)
    await close_session(store.client, request.cookies.get(SESSION_COOKIE))
    response = RedirectResponse("/", status_code=303)
    response.delete_cookie(SESSION_COOKIE, path="/")
    return response


@router.get("/static/dashboard.css")
async def stylesheet() -> Response:
    css = files("aggregator").joinpath("dashboard.css").read_text()
    return Response(css, media_type="text/css", headers={"Cache-Control": "max-age=300"})
