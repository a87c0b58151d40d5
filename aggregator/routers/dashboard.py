"""GET / : the dashboard page (server-rendered SVG), its sign-in and stylesheet.

How the key reaches the page: it never does.  The analyst signs in with the
form (POST /login, key in the body) or opens ``/?key=<analyst key>`` once (for
scripts and ``ldp up``'s printed link); either way the answer is a redirect
to ``/`` that sets an HttpOnly, SameSite=Strict cookie derived from the key
(``auth.KeyRing.session_for``), so the key leaves the address bar at once and
the page holds no credential.  ``Authorization: Bearer`` works too.  The
access log redacts query strings (``app._RedactQuery``).
"""

from __future__ import annotations

from importlib.resources import files
from typing import Annotated
from urllib.parse import parse_qs

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from aggregator.auth import SESSION_COOKIE
from aggregator.deps import KeyRingDep, SettingsDep, StoreDep, is_analyst
from aggregator.page import login_page, metrics_page
from aggregator.service import estimate_response
from aggregator.settings import Settings
from aggregator.views import EstimateOptions

__all__ = ["MAX_METRICS", "SERIES_POINTS", "router"]

router = APIRouter(tags=["dashboard"])

#: Most metrics drawn on one page, and most epochs per series chart.
MAX_METRICS = 50
SERIES_POINTS = 60
_SESSION_SECONDS = 8 * 3600
_MAX_LOGIN_BODY = 4096


def _signed_in(settings: Settings, session: str) -> RedirectResponse:
    response = RedirectResponse("/", status_code=303)
    response.set_cookie(
        SESSION_COOKIE,
        session,
        max_age=_SESSION_SECONDS,
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
    if key is not None:
        if not ring.check_key(key):
            return _login("That key is not an analyst key.")
        return _signed_in(settings, ring.session_for(key))
    if not is_analyst(request, ring):
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


@router.post("/login")
async def login(request: Request, ring: KeyRingDep, settings: SettingsDep) -> Response:
    """The form's POST: a urlencoded ``key`` field (bounded body)."""
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
    return _signed_in(settings, ring.session_for(key))


@router.post("/logout")
async def logout() -> Response:
    response = RedirectResponse("/", status_code=303)
    response.delete_cookie(SESSION_COOKIE, path="/")
    return response


@router.get("/static/dashboard.css")
async def stylesheet() -> Response:
    css = files("aggregator").joinpath("dashboard.css").read_text()
    return Response(css, media_type="text/css", headers={"Cache-Control": "max-age=300"})
