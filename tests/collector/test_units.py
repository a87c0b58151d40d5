"""Pure parts of the collector: settings, keys, rate limit, body limits, epochs, telemetry."""

from __future__ import annotations

import gzip
import subprocess
from pathlib import Path

import pytest
from pydantic import ValidationError

from collector.ingest import EpochWindow, inflate
from collector.settings import Settings
from collector.telemetry import Telemetry
from ldp_core.metric import MetricSpec
from ldp_server.keys import KeyRing, bearer_key
from ldp_server.problems import Problem
from ldp_server.redis_server import free_port
from ldp_server.service import uvicorn_argv
from ldp_server.settings import SettingsError, load
from tests.support.reports import SPECS
from tests.support.servers import REPO_ROOT

LONG = "k" * 24
SECRET = "5e" * 32


def test_dev_settings_and_secrets_stay_out_of_repr() -> None:
    s = Settings(env="dev", ingest_keys="abc, def ,,", admin_keys="admin-key-123")
    assert s.keys_by_role() == {
        "ingest": ("abc", "def"),
        "admin": ("admin-key-123",),
        "analyst": (),
    }
    assert "admin-key-123" not in repr(s) and "abc" not in str(s)
    assert Settings(redis_cluster_nodes="127.0.0.1:7000,h:7001").cluster_nodes() == [
        ("127.0.0.1", 7000),
        ("h", 7001),
    ]
    assert Settings(redis_url="redis://:pw@127.0.0.1:1/0").redis_target == "redis://127.0.0.1:1/0"


@pytest.mark.parametrize(
    ("env", "problem"),
    [
        ({"ingest_keys": LONG, "redis_url": "redis://x"}, "LDP_ADMIN_KEYS is empty"),
        ({"admin_keys": LONG, "redis_url": "redis://x"}, "LDP_INGEST_KEYS is empty"),
        (
            {"admin_keys": LONG, "ingest_keys": "short", "redis_url": "redis://x"},
            "ingest key is shorter than 24",
        ),
        ({"admin_keys": LONG, "ingest_keys": LONG, "analyst_keys": "x"}, "analyst key is shorter"),
        ({"admin_keys": LONG, "ingest_keys": LONG}, "no LDP_REDIS_URL"),
    ],
)
def test_prod_refuses_unsafe_settings(env: dict[str, str], problem: str) -> None:
    with pytest.raises(ValidationError, match=problem):
        Settings(env="prod", **env)  # type: ignore[arg-type]


def test_prod_accepts_safe_settings_and_rejects_bad_secrets() -> None:
    ok = Settings(env="prod", admin_keys=LONG, ingest_keys=LONG + "i", redis_url="redis://x",
                  server_secret=SECRET)  # type: ignore[arg-type]
    assert ok.env == "prod" and ok.secret_bytes() == bytes.fromhex(SECRET)
    with pytest.raises(ValidationError, match="hex"):
        Settings(server_secret="not hex")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="16 bytes"):
        Settings(server_secret="00ff")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="not both"):
        Settings(redis_url="redis://x", redis_cluster_nodes="h:1")


def test_prod_requires_the_server_secret_and_never_echoes_a_key() -> None:
    """Without LDP_SERVER_SECRET the digest key would live in Redis beside the digests."""
    keys = {"admin_keys": "admin-" + LONG, "ingest_keys": "ingest-" + LONG}
    with pytest.raises(SettingsError) as info:
        load(Settings, env="prod", redis_url="redis://x", **keys)
    message = str(info.value)
    assert "LDP_SERVER_SECRET" in message and "\n" not in message
    assert all(key not in message for key in keys.values())
    # A bad secret is refused without echoing it, in any mode.
    with pytest.raises(SettingsError) as info:
        load(Settings, server_secret="zz" + SECRET)
    assert "LDP_SERVER_SECRET must be hex" in str(info.value) and SECRET not in str(info.value)
    # In dev the secret may be absent (created once in Redis).
    assert load(Settings, **keys).secret_bytes() is None


def test_collector_process_refuses_prod_without_secret_in_one_line(tmp_path: Path) -> None:
    """``uvicorn --factory collector.app:create_app`` exits 1 with one line naming the
    variable; no key appears on stderr, and no port is ever opened."""
    keys = {"LDP_ADMIN_KEYS": "admin-" + LONG, "LDP_INGEST_KEYS": "ingest-" + LONG}
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO_ROOT), "LDP_ENV": "prod",
           "LDP_REDIS_URL": "redis://127.0.0.1:1/0", **keys}
    port = free_port()
    out = subprocess.run(
        uvicorn_argv("collector.app:create_app", "127.0.0.1", port), env=env, cwd=tmp_path,
        capture_output=True, text=True, timeout=60,
    )
    assert out.returncode == 1
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "LDP_SERVER_SECRET" in lines[0], out.stderr
    assert lines[0].startswith("collector: Settings refused: LDP_ENV=prod")
    assert all(key not in out.stderr + out.stdout for key in keys.values())


def test_key_ring_roles() -> None:
    ring = KeyRing.from_keys({"ingest": ("i" * 30,), "admin": ("a" * 30,), "analyst": ("z" * 30,)})
    assert [ring.role_of(k * 30) for k in "iaz"] == ["ingest", "admin", "analyst"]
    assert ring.role_of("i" * 29) is None and ring.role_of("") is None
    assert all(len(d) == 32 for d, _ in ring.entries)  # only digests are held
    assert bearer_key("Bearer  abc ") == "abc" and bearer_key("bearer abc") == "abc"
    assert bearer_key("Basic abc") is None and bearer_key("Bearer ") is None
    assert bearer_key(None) is None


def test_inflate_limits() -> None:
    raw = b'{"a": 1}' * 100
    assert inflate(gzip.compress(raw), "gzip", 10_000) == raw
    assert inflate(raw, None, 10) == raw  # identity: the raw cap applies, not this one
    with pytest.raises(Problem) as info:
        inflate(gzip.compress(raw), "gzip", len(raw) - 1)
    assert (info.value.status, info.value.code) == (413, "body_too_large")
    assert inflate(gzip.compress(raw), "GZIP", len(raw)) == raw  # exactly at the cap
    with pytest.raises(Problem) as info:
        inflate(gzip.compress(raw)[:-4], "gzip", 10_000)
    assert info.value.code == "invalid_gzip"
    with pytest.raises(Problem) as info:
        inflate(gzip.compress(raw) + b"junk", "gzip", 10_000)
    assert info.value.code == "invalid_gzip"
    with pytest.raises(Problem) as info:
        inflate(raw, "deflate", 10_000)
    assert (info.value.status, info.value.code) == (415, "unsupported_encoding")


def test_epoch_window_for_days_and_hours() -> None:
    day = MetricSpec.from_json(SPECS["browser"])
    hour = MetricSpec.from_json({**SPECS["browser"], "epoch": "hour"})
    now = 1000 * 86400 + 10.0
    w = EpochWindow(now, retention_seconds=31 * 86400, skew_epochs=1)
    assert w.check(day, 1000) is None and w.check(day, 1001) is None
    assert w.check(day, 1002) == "epoch_in_future"
    assert w.check(day, 1000 - 31) is None and w.check(day, 1000 - 32) == "epoch_expired"
    h = 1000 * 24
    assert w.check(hour, h + 1) is None and w.check(hour, h + 2) == "epoch_in_future"
    assert w.check(hour, h - 31 * 24) is None
    assert w.check(hour, h - 31 * 24 - 1) == "epoch_expired"


def test_telemetry_text() -> None:
    t = Telemetry()
    t.record_batch(accepted=5, duplicates=2, rejected={"bad_token": 1}, seconds=0.003)
    t.record_batch(accepted=1, duplicates=0, rejected={}, seconds=9.0)
    t.record_error("rate_limited")
    text = t.render()
    assert "ldp_reports_accepted_total 6\n" in text
    assert 'ldp_reports_rejected_total{reason="bad_token"} 1\n' in text
    assert 'ldp_batches_refused_total{code="rate_limited"} 1\n' in text
    assert 'ldp_batch_seconds_bucket{le="0.0025"} 0\n' in text
    assert 'ldp_batch_seconds_bucket{le="0.005"} 1\n' in text
    assert 'ldp_batch_seconds_bucket{le="+Inf"} 2\n' in text
    assert "ldp_batch_seconds_count 2\n" in text
