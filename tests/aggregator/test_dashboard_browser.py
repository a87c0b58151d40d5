"""The dashboard in real headless Chromium against a live aggregator and a real Redis.

Tallies are simulated (fixed seeds) and written through the collector store's
ingest path; the aggregator runs as a uvicorn subprocess.  The test signs in
with the form's POST (the key never goes in a URL), hands the session cookie
to Chromium (DevTools protocol on a pipe, ``tests/aggregator/cdp.py``) and
loads the page at two widths: the DOM must hold one ``rect.bar`` and one
``line.ci`` per value, the charts must fill the width, and full-page
screenshots are saved under ``test-artifacts/`` (dashboard-1280.png,
dashboard-600.png).  The sessions: random, server-side, revoked on logout,
same-origin sign-in only; no key in any URL the dashboard emits.
"""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import redis

from ldp_core.simulate import tallies
from ldp_server.redis_server import RedisServer
from tests.aggregator.cdp import Browser
from tests.support.servers import ANALYST_KEY, REPO_ROOT, auth, start_uvicorn
from tests.support.tallies import register, write_tallies

pytestmark = pytest.mark.browser

ARTIFACTS = REPO_ROOT / "test-artifacts"
E0 = 20_400
OS_NAMES = ["android", "ios", "windows", "macos", "linux", "chromeos", "other"]


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    pytest.skip("chromium not installed: install Debian's chromium (CI does)")


class Elements(HTMLParser):
    """(tag, classes, ids of enclosing sections, classes of the enclosing svg) per element."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[tuple[str, dict[str, str]]] = []
        self.found: list[tuple[str, set[str], str, set[str]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        section = next((x["id"] for t, x in reversed(self.stack) if t == "section"), "")
        svg = next(
            (set(x.get("class", "").split()) for t, x in reversed(self.stack) if t == "svg"), set()
        )
        self.found.append((tag, set(a.get("class", "").split()), section, svg))
        self.stack.append((tag, a))

    def handle_endtag(self, tag: str) -> None:
        for i in range(len(self.stack) - 1, -1, -1):
            if self.stack[i][0] == tag:
                del self.stack[i:]
                return

    def count(self, tag: str, cls: str, section: str, svg: str) -> int:
        return sum(
            1 for t, c, s, v in self.found if t == tag and cls in c and s == section and svg in v
        )


@pytest.fixture(scope="module")
def live(
    redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    redis.Redis.from_url(redis_server.url).flushall()
    url = redis_server.url
    shares = np.array([0.45, 0.30, 0.12, 0.06, 0.04, 0.02, 0.01])
    spec = register(
        url,
        {
            "name": "os",
            "kind": "categorical",
            "domain": OS_NAMES,
            "epsilon": 2.0,
            "mechanism": "grr",
            "min_reports": 400,
        },
    )
    epochs = {}
    for k, n in enumerate((3000, 2500, 150, 2800)):  # the third day is suppressed
        values = np.repeat(np.arange(len(OS_NAMES)), np.round(shares * n).astype(int))
        t, count = tallies(spec.build(), values, seed=100 + k)
        epochs[E0 + k] = (t.tolist(), count)
    write_tallies(url, spec, epochs)
    flag = register(
        url, {"name": "dark_mode", "kind": "boolean", "epsilon": 1.0, "min_reports": 400}
    )
    t, count = tallies(flag.build(), [1] * 1200 + [0] * 1800, seed=7)
    write_tallies(url, flag, {E0: (t.tolist(), count)})
    rare = register(
        url, {"name": "rare_event", "kind": "boolean", "epsilon": 1.0, "min_reports": 5000}
    )
    t, count = tallies(rare.build(), [1] * 50 + [0] * 250, seed=8)
    write_tallies(url, rare, {E0: (t.tolist(), count)})
    env = {"LDP_ENV": "dev", "LDP_REDIS_URL": url, "LDP_ANALYST_KEYS": ANALYST_KEY}
    service = start_uvicorn(
        "aggregator.app:create_app", env, log_dir=tmp_path_factory.mktemp("agg")
    )
    try:
        yield {"url": service.url, "service": service, "redis_url": url,
               "os_n": sum(n for _, n in epochs.values())}
    finally:
        service.stop()


def sign_in(base: str) -> str:
    """The session token of a same-origin form sign-in (the key in the body only)."""
    r = httpx.post(base + "/login", data={"key": ANALYST_KEY}, headers={"Origin": base})
    assert r.status_code == 303, r.text
    token = r.cookies["ldp_dashboard"]
    assert ANALYST_KEY not in token and len(token) == 43
    return token


def urls_in(html: str) -> list[str]:
    """Every URL the page emits: href, action and src attributes."""
    return re.findall(r'(?:href|action|src)="([^"]*)"', html)


def day(epoch: int) -> str:
    return time.strftime("%Y-%m-%d", time.gmtime(epoch * 86400))


@pytest.fixture()
def browser(tmp_path: Path) -> Iterator[Browser]:
    b = Browser(chromium(), tmp_path / "profile")
    try:
        yield b
    finally:
        b.close()


def test_dashboard_in_chromium(live: dict[str, Any], browser: Browser) -> None:
    base = live["url"]
    browser.set_cookie("ldp_dashboard", sign_in(base), base)
    ARTIFACTS.mkdir(exist_ok=True)
    for width in (1280, 600):
        browser.open(base + "/", width)
        dom = browser.dom()
        assert ANALYST_KEY not in dom
        page = Elements()
        page.feed(dom)
        # One bar and one interval per value of the categorical metric ...
        assert page.count("rect", "bar", "metric-os", "bars") == len(OS_NAMES), dom[:2000]
        assert page.count("line", "ci", "metric-os", "bars") == len(OS_NAMES)
        # ... and of the boolean (a single value).
        assert page.count("rect", "bar", "metric-dark_mode", "bars") == 1
        assert page.count("line", "ci", "metric-dark_mode", "bars") == 1
        # The series: three shown days with a band, the suppressed day marked.
        assert page.count("circle", "point", "metric-os", "series") == 3
        assert page.count("path", "band", "metric-os", "series") >= 1
        assert page.count("rect", "suppressed-epoch", "metric-os", "series") == 1
        # The suppressed metric shows its reason and no chart.
        assert page.count("rect", "bar", "metric-rare_event", "bars") == 0
        assert "300 reports in the window, below the metric's minimum of 5000" in dom
        assert "ε = 2 per report, per device, per metric, per day" in dom
        assert f"n = {live['os_n']}" in dom
        # Controls: the window picker, the index, the CSV links, a compare form per metric.
        assert dom.count('<form class="window"') == 1 and dom.count('<nav class="index"') == 1
        assert dom.count('<form class="compare"') == 3
        assert "/v1/estimates/os?format=csv&amp;series=epoch" in dom
        # Charts fill their section at both widths (SVG viewBox, width 100%).
        ratio = browser.evaluate(
            "document.querySelector('#metric-os svg.bars').getBoundingClientRect().width / "
            "document.querySelector('#metric-os').clientWidth"
        )
        assert 0.9 < ratio <= 1.0, ratio
        # Round ticks on the value axes (multiples of a 1, 2, 2.5 or 5 step).
        ticks = browser.evaluate(
            "[...document.querySelectorAll('#metric-os svg.bars text.tick')]"
            ".map(t => t.textContent)"
        )
        assert ticks and all(re.fullmatch(r"-?\d+(\.\d{1,3})?", t) for t in ticks), ticks
        shot = ARTIFACTS / f"dashboard-{width}.png"
        shot.unlink(missing_ok=True)
        browser.screenshot(shot)
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
    # A window picked with dates: the second and third days (the third is suppressed).
    browser.open(f"{base}/?metric=os&start={day(E0 + 1)}&end={day(E0 + 3)}", 1280)
    dom = browser.dom()
    page = Elements()
    page.feed(dom)
    assert dom.count('<section class="metric"') == 1
    assert page.count("circle", "point", "metric-os", "series") == 1
    assert page.count("rect", "suppressed-epoch", "metric-os", "series") == 1
    # The comparison asked from the page: android (45%) against ios (30%).
    browser.open(f"{base}/?metric=os&a=android&b=ios", 1280)
    dom = browser.dom()
    assert "'android' is larger than 'ios'" in dom, dom[-3000:]
    browser.screenshot(ARTIFACTS / "dashboard-compare.png")


def sign_in_link(base: str) -> str:
    """A one-time sign-in link, minted with the analyst key (never a key in a URL)."""
    minted = httpx.post(base + "/v1/sessions", headers=auth(ANALYST_KEY))
    assert minted.status_code == 201, minted.text
    return base + minted.json()["path"]


def test_page_needs_a_key_and_sends_security_headers(live: dict[str, Any]) -> None:
    base = live["url"]
    same_site = {"Origin": base}
    anonymous = httpx.get(base + "/")
    assert anonymous.status_code == 401 and 'action="/login"' in anonymous.text
    assert "metric-os" not in anonymous.text
    # A key in a URL signs nobody in, even the analyst's.
    in_url = httpx.get(base + "/", params={"key": ANALYST_KEY})
    assert in_url.status_code == 401 and "set-cookie" not in in_url.headers
    # The form, from this origin: a random session id in an HttpOnly, Strict cookie.
    form = httpx.post(base + "/login", data={"key": ANALYST_KEY}, headers=same_site)
    assert form.status_code == 303 and form.headers["location"] == "/"
    cookie = form.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie.replace("Strict", "strict")
    assert ANALYST_KEY not in cookie
    page = httpx.get(base + "/", cookies=form.cookies)
    assert page.status_code == 200 and 'id="metric-os"' in page.text
    assert ANALYST_KEY not in page.text and "<script" not in page.text
    headers = page.headers
    csp = headers["content-security-policy"]
    assert "default-src 'self'" in csp and "frame-ancestors 'none'" in csp
    assert headers["x-content-type-options"] == "nosniff"
    assert headers["referrer-policy"] == "no-referrer"
    assert httpx.get(base + "/", headers=auth(ANALYST_KEY)).status_code == 200
    css = httpx.get(base + "/static/dashboard.css")
    assert css.status_code == 200 and css.headers["content-type"].startswith("text/css")
    # The session cookie also authorises the JSON API the page is built from.
    assert httpx.get(base + "/v1/metrics", cookies=form.cookies).status_code == 200
    # Login CSRF: a cross-site (or origin-less) form post signs nobody in or out.
    for foreign in ({"Origin": "https://evil.example"}, {}):
        forged = httpx.post(base + "/login", data={"key": ANALYST_KEY}, headers=foreign)
        assert forged.status_code == 403 and "set-cookie" not in forged.headers
        kept = httpx.post(base + "/logout", cookies=form.cookies, headers=foreign)
        assert kept.status_code == 403
    assert httpx.get(base + "/", cookies=form.cookies).status_code == 200
    # Signing out revokes the session on the server: the old cookie is dead.
    out = httpx.post(base + "/logout", cookies=form.cookies, headers=same_site)
    assert out.status_code == 303 and 'ldp_dashboard=""' in out.headers["set-cookie"]
    assert httpx.get(base + "/", cookies=form.cookies).status_code == 401
    assert httpx.get(base + "/v1/metrics", cookies=form.cookies).status_code == 401
    # A one-time link works once, and carries a ticket, not a key.
    link = sign_in_link(base)
    assert ANALYST_KEY not in link
    first = httpx.get(link)
    assert first.status_code == 303 and httpx.get(base + "/", cookies=first.cookies).is_success
    assert httpx.get(link).status_code == 401


def test_the_key_never_appears_in_a_url_the_dashboard_emits(live: dict[str, Any]) -> None:
    base = live["url"]
    cookies = {"ldp_dashboard": sign_in(base)}
    queries = [{}, {"metric": "os", "since": "7d"}, {"start": day(E0), "end": day(E0 + 2)},
               {"metric": "os", "a": "ios", "threshold": "0.2"}, {"start": "not-a-date"}]
    emitted: list[str] = []
    for query in queries:
        r = httpx.get(base + "/", params=query, cookies=cookies)
        assert r.status_code == 200, (query, r.text[:500])
        emitted += urls_in(r.text)
        assert ANALYST_KEY not in r.text
    login = httpx.get(base + "/")
    signed_in = httpx.post(base + "/login", data={"key": ANALYST_KEY}, headers={"Origin": base})
    emitted += [*urls_in(login.text), signed_in.headers["location"], sign_in_link(base)]
    # The CSV links the page emits work with the session cookie alone.
    csv = httpx.get(base + "/v1/estimates/os", params={"format": "csv"}, cookies=cookies)
    assert csv.status_code == 200 and csv.text.startswith("metric,version,kind,scope")
    assert len(emitted) > 20
    assert not [u for u in emitted if ANALYST_KEY in u or "key=" in u]
