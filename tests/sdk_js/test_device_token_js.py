"""The TypeScript SDK's ``deviceToken`` against a jwt collector (sdk-js/test/e2e-device-token.ts).

The collector runs with ``LDP_DEVICE_AUTH=jwt`` over a local identity provider
(real RSA key, JWKS over HTTP on 127.0.0.1, ``tests.support.jwks``); the node
script gets a valid and an expired login token signed by it.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from ldp_server.redis_server import RedisServer
from tests.collector.test_device_auth import jwt_env
from tests.sdk_js.test_sdk_js import CLIENT_SPECS, SDK, needs_node, register
from tests.support.jwks import IdentityProvider
from tests.support.servers import INGEST_KEY, start_collector


@needs_node
def test_the_js_client_sends_the_app_login_token(
    built: Path, redis_server: RedisServer, tmp_path: Path
) -> None:
    import redis

    with redis.Redis(port=redis_server.port) as client:
        client.flushall()
    now = int(time.time())
    with IdentityProvider.start() as idp, \
            start_collector(redis_server.url, log_dir=tmp_path,
                            extra_env=jwt_env(idp.url)) as collector:
        register(collector.url, CLIENT_SPECS)
        env = {**os.environ, "LDP_E2E_URL": collector.url, "LDP_E2E_KEY": INGEST_KEY,
               "LDP_E2E_GOOD": idp.token("js-user"),
               "LDP_E2E_EXPIRED": idp.token("js-user", iat=now - 7200, exp=now - 3600)}
        done = subprocess.run(["node", "--test", "dist/test/e2e-device-token.js"], cwd=SDK,
                              env=env, capture_output=True, text=True, timeout=300)
    summary = [line for line in done.stdout.splitlines() if line.startswith("# ")]
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    assert "# fail 0" in summary and "# pass 1" in summary, summary
