"""GET /docs of both services: a plain HTML page generated from the OpenAPI document.

No script, no stylesheet, nothing fetched from anywhere (no CDN): it passes
the aggregator's strict Content-Security-Policy as it is.  Each operation is
listed with its summary, description, parameters and responses; the raw
document stays at /openapi.json.

>>> doc = {"info": {"title": "demo <api>", "version": "1"},
...        "paths": {"/healthz": {"get": {"summary": "Up?", "responses": {"200": {}}}}}}
>>> page = docs_html(doc)
>>> "<h2 id=\\"get-healthz\\">GET /healthz</h2>" in page, "demo &lt;api&gt;" in page
(True, True)
>>> "<script" in page
False
"""

from __future__ import annotations

import re
from html import escape
from typing import Any

__all__ = ["docs_html"]

_METHODS = ("get", "post", "put", "patch", "delete")


def _anchor(method: str, path: str) -> str:
    return method + "-" + re.sub(r"[^a-z0-9]+", "-", path.lower()).strip("-")


def _operation(method: str, path: str, op: dict[str, Any]) -> list[str]:
    out = [f'<h2 id="{_anchor(method, path)}">{method.upper()} {escape(path)}</h2>']
    if op.get("summary"):
        out.append(f"<p><strong>{escape(str(op['summary']))}</strong></p>")
    if op.get("description"):
        out += [f"<p>{escape(part)}</p>" for part in str(op["description"]).split("\n\n")]
    params = op.get("parameters") or []
    if params:
        out.append("<table><tr><th>parameter</th><th>in</th><th>required</th>"
                   "<th>description</th></tr>")
        for p in params:
            out.append(
                f"<tr><td><code>{escape(str(p.get('name', '')))}</code></td>"
                f"<td>{escape(str(p.get('in', '')))}</td>"
                f"<td>{'yes' if p.get('required') else 'no'}</td>"
                f"<td>{escape(str(p.get('description', '')))}</td></tr>"
            )
        out.append("</table>")
    if op.get("requestBody"):
        types = ", ".join(op["requestBody"].get("content", {}))
        out.append(f"<p>Request body: {escape(types) or 'yes'}</p>")
    responses = op.get("responses") or {}
    if responses:
        out.append("<ul>")
        out += [
            f"<li><code>{escape(str(code))}</code> {escape(str(r.get('description', '')))}</li>"
            for code, r in responses.items()
            if isinstance(r, dict)
        ]
        out.append("</ul>")
    return out


def docs_html(document: dict[str, Any]) -> str:
    """The whole page: a contents list, then one section per operation."""
    info = document.get("info", {})
    title = escape(f"{info.get('title', 'API')} {info.get('version', '')}".strip())
    ops = [
        (method, path, op)
        for path, item in sorted(document.get("paths", {}).items())
        for method, op in item.items()
        if method in _METHODS and isinstance(op, dict)
    ]
    body = [
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{title}</title></head><body>",
        f"<h1>{title}</h1>",
        '<p>The machine-readable document: <a href="/openapi.json">/openapi.json</a>.</p>',
    ]
    if info.get("description"):
        body.append(f"<p>{escape(str(info['description']))}</p>")
    body.append("<ul>")
    body += [
        f'<li><a href="#{_anchor(m, p)}">{m.upper()} {escape(p)}</a></li>' for m, p, _ in ops
    ]
    body.append("</ul>")
    for method, path, op in ops:
        body += _operation(method, path, op)
    body.append("</body></html>")
    return "\n".join(body) + "\n"
