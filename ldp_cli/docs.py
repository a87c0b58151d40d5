"""docs/operating.md's "Operating" section, generated from the settings classes (no drift).

    python -m ldp_cli.docs            # print the section (between its two markers)

Every field of ``collector.settings.Settings`` and ``aggregator.settings.Settings``
(the shared ones from ``ldp_server.settings.ServerSettings``) becomes a row:
its variable, which services read it, its default and its description (the
field's docstring).  What is refused is not written by hand either: the
classes are given probe configurations and their own refusal messages are
listed (prod-only, then every mode).  tests/ldp_cli/test_operating_doc.py
compares docs/operating.md's section with this output.

>>> text = operating_section()
>>> text.startswith(START) and text.rstrip().endswith(END)
True
>>> "| `LDP_REDIS_URL` |" in text and "| `LDP_SHARDS` | collector | `4` |" in text
True
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from pydantic import BaseModel, SecretStr

from aggregator.settings import Settings as AggregatorSettings
from collector.settings import Settings as CollectorSettings
from ldp_server.settings import ServerSettings, SettingsError, load

__all__ = ["END", "START", "operating_section", "prod_refusals"]

START = "<!-- operating:start -->"
END = "<!-- operating:end -->"
SERVICES: dict[str, type[ServerSettings]] = {
    "collector": CollectorSettings,
    "aggregator": AggregatorSettings,
}

#: Variables read outside the settings classes (command line, ``ldp up``, compose).
OTHER = (
    ("LDP_HOST", "ldp serve", "`127.0.0.1`", "Interface to bind (the image sets 0.0.0.0)."),
    ("LDP_PORT", "ldp serve", "8000 / 8001", "Port of the collector / the aggregator."),
    ("LDP_WORKERS", "ldp serve", "`1`", "Worker processes; metrics are summed over them."),
    ("PROMETHEUS_MULTIPROC_DIR", "ldp serve", "a temporary folder",
     "Folder of the multiprocess metrics (emptied at start) when workers > 1."),
    ("LDP_DATA_DIR", "ldp up, ldp CLI", "`~/.local/share/ldp-telemetry`",
     "Data folder: keys.json (0600), up.lock, status.json, redis/, logs/."),
    ("LDP_COLLECTOR_URL / LDP_AGGREGATOR_URL", "ldp CLI", "DIR/endpoints.json",
     "Where the CLI's queries go."),
    ("LDP_ADMIN_KEY / LDP_ANALYST_KEY", "ldp CLI", "DIR/keys.json", "The key the CLI sends."),
    ("LDP_REDIS_PASSWORD, LDP_REDIS_MAXMEMORY", "compose.yaml", "(none), `1gb`",
     "Redis container's password and memory cap (noeviction)."),
    ("LDP_COLLECTOR_HOST, LDP_AGGREGATOR_HOST, LDP_TLS", "deploy/Caddyfile",
     "`*.localhost`, `internal`", "Public host names and the ACME e-mail of the proxy."),
)

#: Probe configurations whose refusals are listed (values are harmless stand-ins).
_SHORT = "short-key"
_PROBES_PROD: tuple[dict[str, Any], ...] = (
    {},
    {"admin_keys": _SHORT, "ingest_keys": _SHORT + "i", "analyst_keys": _SHORT + "a",
     "metrics_key": _SHORT + "m", "cors_origins": "*", "redis_url": "redis://h/0"},
    {"device_auth": "jwt", "jwt_jwks_url": "http://h/jwks", "jwt_issuer": "https://i",
     "jwt_audience": "a"},
    {"install_pow_bits": 0},
)
_PROBES_ANY: tuple[dict[str, Any], ...] = (
    {"redis_url": "http://h/0"},
    {"redis_cluster_nodes": "h"},
    {"redis_url": "redis://h/0", "redis_cluster_nodes": "h:1"},
    {"admin_keys": "k" * 24, "ingest_keys": "k" * 24},
    {"analyst_keys": "bad key"},
    {"metrics_key": "k" * 24, "analyst_keys": "k" * 24},
    {"server_secret": "zz"},
    {"server_secret": "00ff"},
    {"trusted_proxies": "proxy.example"},
    {"device_auth": "jwt"},
    {"device_auth": "jwt", "jwt_jwks_url": "ftp://h/jwks", "jwt_jwks_file": "/j",
     "jwt_issuer": "https://i", "jwt_audience": "a", "jwt_algorithms": "HS256"},
    {"install_pow_n": 1000},
)


@contextmanager
def _no_environment() -> Iterator[None]:
    """The classes read LDP_* from the environment: hide it while probing."""
    saved = {k: os.environ.pop(k) for k in list(os.environ) if k.startswith("LDP_")}
    try:
        yield
    finally:
        os.environ.update(saved)


def _refusals(cls: type[ServerSettings], probes: tuple[dict[str, Any], ...],
              **base: Any) -> list[str]:
    with _no_environment():
        return _probe(cls, probes, **base)


def _probe(cls: type[ServerSettings], probes: tuple[dict[str, Any], ...],
           **base: Any) -> list[str]:
    found: list[str] = []
    for probe in probes:
        fields = {k: v for k, v in probe.items() if k in cls.model_fields}
        if len(fields) < len(probe) and not fields:
            continue
        try:
            load(cls, _env_file=None, **base, **fields)
        except SettingsError as exc:
            reasons = str(exc).split(" refused: ", 1)[1]
            reasons = reasons.replace("LDP_ENV=prod refuses unsafe settings: ", "")
            for reason in reasons.split("; "):
                if reason not in found:
                    found.append(reason)
    return found


def prod_refusals(cls: type[ServerSettings]) -> list[str]:
    """What ``LDP_ENV=prod`` refuses for this class, in its own words.

    >>> prod_refusals(AggregatorSettings)[0]
    'LDP_ANALYST_KEYS is empty'
    """
    return _refusals(cls, _PROBES_PROD, env="prod")


def _default(model: type[BaseModel], name: str) -> str:
    info = model.model_fields[name]
    value = info.get_default(call_default_factory=True)
    if value is None or (isinstance(value, SecretStr) and not value.get_secret_value()):
        return "(none)"
    if isinstance(value, SecretStr):
        return "(secret)"
    if value == "":
        return "(empty)"
    return f"`{value}`"


def _rows() -> list[str]:
    readers: dict[str, list[str]] = {}
    owner: dict[str, type[ServerSettings]] = {}
    for service, cls in SERVICES.items():
        for name in cls.model_fields:
            readers.setdefault(name, []).append(service)
            owner.setdefault(name, cls)
    shared = [n for n in ServerSettings.model_fields]
    ordered = shared + sorted(n for n in readers if n not in shared)
    rows = ["| variable | read by | default | meaning |", "| --- | --- | --- | --- |"]
    for name in ordered:
        cls = owner[name]
        # A docstring wrapped over lines is one table cell.
        description = " ".join((cls.model_fields[name].description or "").split())
        description = description.replace("|", "\\|")
        rows.append(f"| `LDP_{name.upper()}` | {', '.join(readers[name])} | "
                    f"{_default(cls, name)} | {description} |")
    return rows


def operating_section() -> str:
    """The whole section, markers included (markdown)."""
    out = [
        START,
        "## Operating",
        "",
        "*Generated by `python -m ldp_cli.docs` from the settings classes; "
        "tests/ldp_cli/test_operating_doc.py fails when this section and the code differ.*",
        "",
        "Run each service with `ldp serve collector|aggregator` (workers, JSON logs, "
        "graceful shutdown on SIGTERM, settings checked before any worker starts), "
        "from the image (`Containerfile`, `deploy/build-image.sh`), the compose file "
        "(`compose.yaml`: Redis append-only on a volume, Caddy with TLS in front) or "
        "the systemd units in `deploy/systemd/`.  A refused setting stops the service "
        "with one line naming the variables, never their values.  `/metrics` sums every "
        "worker; it needs `LDP_METRICS_KEY` (Bearer) when set and is not served in prod "
        "without it.  `/docs` is a plain HTML page of the OpenAPI document (no CDN).",
        "",
        "### Settings (environment)",
        "",
        *_rows(),
        "",
        "### What `LDP_ENV=prod` refuses",
        "",
    ]
    for service, cls in SERVICES.items():
        out.append(f"- {service}: " + "; ".join(prod_refusals(cls)) + ".")
    out += ["", "### Refused in every mode", ""]
    every: list[str] = []
    for cls in SERVICES.values():
        for reason in _refusals(cls, _PROBES_ANY):
            if reason not in every:
                every.append(reason)
    out += [f"- {reason}" for reason in every]
    out += [
        "",
        "### Outside the services",
        "",
        "| variable | read by | default | meaning |",
        "| --- | --- | --- | --- |",
        *[f"| `{v}` | {who} | {default} | {text} |" for v, who, default, text in OTHER],
        END,
    ]
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    print(operating_section(), end="")
