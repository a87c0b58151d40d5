"""Issue 33: the JS SDK's first day, run from docs/sdk-js.md against a real collector.

- The Node example of the doc, verbatim, on a fresh state folder: its record reaches the
  collector (before: ``held``, ``flush()`` true at once, nothing sent, nothing counted).
- The browser example, verbatim, in headless Chromium: its record answers ``queued`` (in
  IndexedDB) and a next page of the origin delivers it (before: ``held``, in memory only).
- The collector down at the first record: the held value is delivered by ``flush`` once
  the collector is up; with the collector down for good, ``close()`` reports it lost,
  counted and logged (before: ``flush`` true with nothing sent; the value gone silently).
- ``npm pack``: no test bundle, a README, the repository's licence (Apache-2.0).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
from pathlib import Path
from typing import IO, Any

import httpx
import pytest

from ldp_server.redis_server import RedisServer, free_port
from tests.sdk_js.test_sdk_js import CHROMIUM, ROOT, SDK, needs_node, page_reports, register
from tests.support.servers import INGEST_KEY, flushed_collector, start_collector

DOC = ROOT / "docs" / "sdk-js.md"
#: The metrics the two examples of the doc record.
LATENCY = {"name": "checkout.latency_ms", "kind": "numeric", "lo": 0, "hi": 1000,
           "epsilon": 1.0}
THEME = {"name": "app.theme", "kind": "categorical", "domain": ["light", "dark"],
         "epsilon": 1.0}


def doc_block(lang: str, needle: str) -> str:
    """The one fenced ``lang`` block of docs/sdk-js.md that contains ``needle``."""
    blocks = re.findall(rf"^```{lang}\n(.*?)^```", DOC.read_text(), re.M | re.S)
    found = [b for b in blocks if needle in b]
    assert len(found) == 1, (lang, needle, len(found))
    return str(found[0])


def accepted(url: str) -> float:
    """The collector's count of accepted reports (its Prometheus text, dev mode)."""
    text = httpx.get(f"{url}/metrics", timeout=10).text
    found = re.search(r"^ldp_reports_accepted_total (\S+)$", text, re.M)
    return float(found.group(1)) if found else 0.0


def next_json(stream: IO[str]) -> Any:
    """The next line of ``stream`` that is a JSON object (the SDK's info lines go to stdout)."""
    while line := stream.readline():
        if line.startswith("{"):
            return json.loads(line)
    raise AssertionError("the script ended without its answer")


def node_env(url: str, state: Path) -> dict[str, str]:
    env = {**os.environ, "LDP_COLLECTOR_URL": url, "LDP_API_KEY": INGEST_KEY,
           "LDP_STATE_DIR": str(state)}
    env.pop("LDP_ISSUER_KEYS", None)
    return env


@needs_node
def test_node_doc_example_delivers_its_first_run_record(
    built: Path, redis_server: RedisServer, tmp_path: Path
) -> None:
    """The doc's Node example, verbatim (a script in sdk-js/dist resolves the package by
    its own name), then one line printing what it left."""
    script = built / "doc-node-example.mjs"
    script.write_text(doc_block("js", "openNodeClient()") + (
        "const closed = client.close();\n"
        "console.log(JSON.stringify({ sent: client.counters.sent,"
        " refused: client.counters.refused, closed }));\n"))
    with flushed_collector(redis_server, log_dir=tmp_path / "collector") as collector:
        register(collector.url, [LATENCY])
        before = accepted(collector.url)
        done = subprocess.run(["node", str(script)], cwd=SDK, capture_output=True, text=True,
                              env=node_env(collector.url, tmp_path / "fresh"), timeout=120)
        assert done.returncode == 0, done.stderr[-3000:]
        left = json.loads(done.stdout.strip().splitlines()[-1])
        assert accepted(collector.url) == before + 1
    assert left == {"sent": 1, "refused": {}, "closed": {"queued": 0, "lost": 0}}, left


#: The collector is down at the first record, then up; then another one down for good.
OFFLINE_SCRIPT = """
import { openNodeClient } from "@ldp-telemetry/sdk/node";
import { createInterface } from "node:readline";
const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
const say = (o) => console.log(JSON.stringify(o));
const [first, second, downUrl] = process.argv.slice(2);
const client = await openNodeClient({ stateDir: first });
say({ answer: await client.record("checkout.latency_ms", 777.125), held: client.held });
await lines.next();   // the collector is up now
say({ flushed: await client.flush(20), sent: client.counters.sent, held: client.held,
      closed: client.close() });
const lost = await openNodeClient({ stateDir: second, url: downUrl });
say({ answer: await lost.record("checkout.latency_ms", 777.125), flushed: await lost.flush(1),
      closed: lost.close(), refused: lost.counters.refused });
process.exit(0);
"""


@needs_node
def test_node_first_record_with_the_collector_down_is_delivered_or_reported(
    built: Path, redis_server: RedisServer, tmp_path: Path
) -> None:
    """As tests/client_sdk/test_first_run.py: a value held while the collector is down is
    delivered by ``flush`` once it is up; one whose specs never arrive is counted
    (``hold_dropped``), answered by ``close()`` and logged, without the value."""
    import redis

    with redis.Redis(port=redis_server.port) as client:
        client.flushall()
    script = built / "first-run-offline.mjs"
    script.write_text(OFFLINE_SCRIPT)
    port, down = free_port(), free_port()
    url = f"http://127.0.0.1:{port}"
    node = subprocess.Popen(
        ["node", str(script), str(tmp_path / "a"), str(tmp_path / "b"), f"http://127.0.0.1:{down}"],
        cwd=SDK, env=node_env(url, tmp_path / "unused"), stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert node.stdin is not None and node.stdout is not None
    try:
        first = next_json(node.stdout)
        assert first["answer"] == {"status": "held", "ok": True}, first
        with start_collector(redis_server.url, log_dir=tmp_path / "collector",
                             port=port) as collector:
            register(collector.url, [LATENCY])
            node.stdin.write("up\n")
            node.stdin.flush()
            delivered = next_json(node.stdout)
            assert accepted(collector.url) == 1
        lost = next_json(node.stdout)
        out, err = node.communicate(timeout=60)
    finally:
        if node.poll() is None:
            node.kill()
            node.wait()
    assert node.returncode == 0, err[-3000:]
    assert first["held"] == 1, first
    assert delivered == {"flushed": True, "sent": 1, "held": 0,
                         "closed": {"queued": 0, "lost": 0}}, delivered
    assert lost == {"answer": {"status": "held", "ok": True}, "flushed": False,
                    "closed": {"queued": 0, "lost": 1}, "refused": {"hold_dropped": 1}}, lost
    assert "1 held value(s) lost" in err and "hold_dropped" in err, err[-3000:]
    assert "777.125" not in err + out    # the value itself is never logged


#: A next page of the origin: opens a Client over the same IndexedDB and flushes.
NEXT_PAGE = """<!doctype html><meta charset="utf-8"><script type="module">
  import { openBrowserClient } from "/ldp-sdk.min.js";
  const first = JSON.parse(decodeURIComponent(location.hash.slice(1)));
  const client = await openBrowserClient({ url: %s, apiKey: %s });
  const flushed = await client.flush(30);
  await fetch("/done", { method: "POST", body: JSON.stringify({ first, flushed }) });
</script>"""


@needs_node
@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="chromium not installed")
def test_browser_doc_example_spools_its_first_run_record(
    built: Path, redis_server: RedisServer, tmp_path: Path,
    page_server: tuple[str, list[dict[str, Any]], threading.Event],
) -> None:
    """The doc's page, verbatim but for the collector's URL and key, in a fresh Chromium
    profile; right after its record the tab moves on to another page of the origin (a user
    clicking through), which delivers what the first left in IndexedDB.  A held value (in
    memory only) would go with the first page."""
    origin, result, arrived = page_server
    example = doc_block("html", "openBrowserClient")
    assert example.count('"https://collector.example"') == example.count('"<ingest key>"') == 1
    page = example.replace("</script>", 'location.replace("/doc-next.html#"'
                        " + encodeURIComponent(JSON.stringify(r)));\n</script>")
    with flushed_collector(redis_server, log_dir=tmp_path / "collector",
                           extra_env={"LDP_CORS_ORIGINS": origin}) as collector:
        register(collector.url, [THEME])
        url, key = json.dumps(collector.url), json.dumps(INGEST_KEY)
        (built / "doc-example.html").write_text('<!doctype html><meta charset="utf-8">\n' + page
            .replace('"https://collector.example"', url).replace('"<ingest key>"', key))
        (built / "doc-next.html").write_text(NEXT_PAGE % (url, key))
        before = accepted(collector.url)
        assert page_reports(f"{origin}/doc-example.html", arrived, 90), "no page reported"
        after = accepted(collector.url)
    first = result[0]["first"]
    assert (first["status"], first["ok"]) == ("queued", True), first
    assert result[0]["flushed"] is True, result[0]
    assert after == before + 1


@needs_node
def test_npm_pack_ships_the_library_a_readme_and_no_tests(built: Path) -> None:
    """``npm pack --dry-run``: the entry points, the bundles and a README; no compiled
    test, e2e page bundle or size-check bundle (before: ~360 kB of them, no README); the
    manifest says Apache-2.0 as the repository does, and ``npm test`` builds first."""
    done = subprocess.run(["npm", "pack", "--dry-run", "--json"], cwd=SDK, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    (info,) = json.loads(done.stdout)
    paths = {f["path"] for f in info["files"]}
    manifest = json.loads((SDK / "package.json").read_text())
    targets = {t.removeprefix("./") for entry in manifest["exports"].values()
               for t in entry.values()}
    assert targets <= paths, targets - paths
    assert {"README.md", "package.json", "dist/ldp-sdk.min.js", "dist/ldp-sdk.iife.js"} <= paths
    shipped_tests = sorted(p for p in paths if re.search(r"test|e2e|bench|shake|\.html$", p))
    assert shipped_tests == [], shipped_tests
    assert manifest["license"] == "Apache-2.0"
    assert (ROOT / "LICENSE").read_text().lstrip().startswith("Apache License")
    assert "npm run build" in manifest["scripts"]["pretest"]
    # The README's Node example is the doc's (one example, not two that drift apart).
    assert doc_block("js", "openNodeClient()") in (SDK / "README.md").read_text()

