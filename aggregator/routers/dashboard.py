"""GET / : the dashboard page (server-rendered SVG), its sign-in and stylesheet.

How the key reaches the page: it never does, and it is never in a URL.  The
analyst signs in with the form (POST /login from this origin, key in the
body) or with a one-time ticket link (``GET /login?ticket=...``, minted by an
analyst key through ``POST /v1/sessions``: ``ldp up`` prints one); either way
the answer is a redirect to ``/`` that sets an HttpOnly, SameSite=Strict
cookie holding a random session id kept in Redis (``aggregator.sessions``),
revoked by POST /logout.  ``/?key=`` signs nobody in.  ``Authorization:
Bearer`` works too. The access log redacts query strings.

The page is a GET form away from any window (``since``, ``start``/``end`` as
UTC dates or epoch numbers, ``confidence``), metric (``metric``) and
comparison (``a``, ``b``, ``threshold``); see ``aggregator.page_controls``.
"""

from __future__ import annotations

from dataclasses import replace
from importlib.resources import files
from typing import Annotated, Any
from urllib.parse import parse_qs

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from aggregator.auth import SESSION_COOKIE
from aggregator.dates import BadDate, window_epochs
from aggregator.deps import AnalystDep, KeyRingDep, SettingsDep, StoreDep, is_analyst
from aggregator.page import login_page, metrics_page
from aggregator.page_controls import (
    DashboardQuery,
    compare_form,
    export_links,
    metric_index,
    notice,
    window_form,
)
from aggregator.paging import ReadBound
from aggregator.problems import Problem
from aggregator.service import compare, estimate_response
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
from ldp_core.metric import MetricSpec

__all__ = ["MAX_METRICS", "SERIES_POINTS", "router"]

router = APIRouter(tags=["dashboard"])

#: Most metrics drawn on one page, and most epochs per series chart.
MAX_METRICS = 50
SERIES_POINTS = 60
_MAX_LOGIN_BODY = 4096
_NO_STORE = {"Cache-Control": "no-store"}

Text = Annotated[str | None, Query(max_length=64)]


async def _signed_in(settings: Settings, store: Store) -> RedirectResponse:
    response = RedirectResponse("/", status_code=303, headers=_NO_STORE)
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


def _login(message: str, status: int = 401) -> HTMLResponse:
    return HTMLResponse(login_page(message), status_code=status, headers=_NO_STORE)


def _cross_site(what: str) -> HTMLResponse:
    return _login(f"{what} from the dashboard's own page.", 403)


def _threshold(text: str | None) -> tuple[float | None, str | None]:
    if not text:
        return None, None
    try:
        value = float(text)
    except ValueError:
        return None, f"threshold={text!r} is not a number"
    return value, None


async def _body(
    store: Store, spec: MetricSpec, q: DashboardQuery, max_epochs: int, bound: ReadBound
) -> tuple[dict[str, Any], str | None]:
    """The metric's estimate with its series in the asked window (or why not)."""
    try:
        window = window_epochs(spec.epoch_seconds, q.start, q.end, since=q.since)
        error = None
    except BadDate as exc:
        window = window_epochs(spec.epoch_seconds, None, None)
        error = f"{exc}: showing every epoch with data instead"
    body = await estimate_response(
        store,
        spec,
        start=window.start,
        end=window.end,
        options=EstimateOptions(q.confidence),
        series=True,
        max_epochs=max_epochs,
        bound=bound,
        tail=SERIES_POINTS,
    )
    return body, error


async def _answer(
    store: Store, spec: MetricSpec, q: DashboardQuery, max_epochs: int, bound: ReadBound
) -> str:
    """The comparison's answer (or why it was refused) as a paragraph."""
    try:
        window = window_epochs(spec.epoch_seconds, q.start, q.end, since=q.since)
        out = await compare(
            store, spec, a=q.a or None, b=q.b or None, threshold=q.threshold,
            start=window.start, end=window.end, confidence=q.confidence,
            max_epochs=max_epochs, bound=bound,
        )
    except (BadDate, Problem) as exc:
        return notice(f"Cannot compare: {exc}", "problem")
    decision = out.get("decision")
    if not decision:
        return notice(str(out["answer"]))
    return notice(
        f"{str(out['answer']).capitalize()}: difference {decision['difference']:.4g}, "
        f"{q.confidence * 100:g}% interval [{decision['ci_low']:.4g}, "
        f"{decision['ci_high']:.4g}] ({out['method']})."
    )


@router.get("/", response_class=HTMLResponse)
async def dashboard(
    request: Request,
    ring: KeyRingDep,
    settings: SettingsDep,
    store: StoreDep,
    metric: Text = None,
    since: Annotated[str | None, Query(max_length=16)] = None,
    start: Annotated[str | None, Query(max_length=32)] = None,
    end: Annotated[str | None, Query(max_length=32)] = None,
    confidence: Annotated[float, Query(gt=0.5, lt=1.0)] = 0.95,
    a: Annotated[str | None, Query(max_length=200)] = None,
    b: Annotated[str | None, Query(max_length=200)] = None,
    threshold: Annotated[str | None, Query(max_length=32)] = None,
) -> Response:
    """The metrics with their estimates; the sign-in page without a session or key."""
    if "key" in request.query_params:  # a key in a URL lands in histories and logs
        return _login("Keys never go in a URL: sign in with the form.")
    if not await is_analyst(request, ring, store):
        return _login("Sign in with an analyst key.")
    value, threshold_error = _threshold(threshold)
    q = DashboardQuery(metric or None, since or None, start or None, end or None, confidence,
                       a or None, b or None, value)
    specs = (await store.list_metrics())[:MAX_METRICS]
    # One page load reads at most what one request may, shared among the metrics
    # drawn; a chosen metric (``metric=``) gets a whole request's worth of its own.
    share = replace(settings.read_bound,
                    max_counters=settings.max_read_counters // max(1, len(specs)))
    bodies, extras, problems = [], {}, []
    for spec in specs:
        bound = settings.read_bound if spec.name == q.metric else share
        body, error = await _body(store, spec, q, settings.max_epochs, bound)
        if error and error not in problems:
            problems.append(error)
        bodies.append(body)
        extra = export_links(body, q) + compare_form(body, q)
        if q.metric == spec.name and threshold_error:
            extra += notice(f"Cannot compare: {threshold_error}", "problem")
        elif q.metric == spec.name and (q.a or q.threshold is not None):
            extra += await _answer(store, spec, q, settings.max_epochs, bound)
        extras[spec.name] = extra
    shown = [b for b in bodies if q.metric in (None, b["metric"])]
    if q.metric and not shown:
        problems.append(f"no metric named {q.metric!r}: showing every metric")
        shown = bodies
    controls = (
        window_form([s.name for s in specs], q)
        + "".join(notice(p, "problem") for p in problems)
        + metric_index(bodies, q)
    )
    # Up to MAX_METRICS charts of up to a domain's bars each: CPU work, off the event loop.
    page = await run_in_threadpool(metrics_page, shown, controls=controls, extras=extras)
    return HTMLResponse(page, headers=_NO_STORE)


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
        return _cross_site("Sign in")
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
    # A new session each time; one the browser held before is revoked (no fixation).
    await close_session(store.client, request.cookies.get(SESSION_COOKIE))
    return await _signed_in(settings, store)


@router.post("/logout")
async def logout(request: Request, store: StoreDep) -> Response:
    """Revoke this browser's session (from this origin only) and drop its cookie."""
    if not same_origin(request):
        return _cross_site("Sign out")
    await close_session(store.client, request.cookies.get(SESSION_COOKIE))
    response = RedirectResponse("/", status_code=303, headers=_NO_STORE)
    response.delete_cookie(SESSION_COOKIE, path="/")
    return response


@router.get("/static/dashboard.css")
async def stylesheet() -> Response:
    css = files("aggregator").joinpath("dashboard.css").read_text()
    return Response(css, media_type="text/css", headers={"Cache-Control": "max-age=300"})
