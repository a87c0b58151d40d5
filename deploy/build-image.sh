#!/bin/sh
# Build localhost/ldp-telemetry:latest from this checkout with podman (or buildah).
#
#   deploy/build-image.sh            # BASE: debian:bookworm-slim from the registry
#   LDP_BASE=debootstrap deploy/build-image.sh
#                                    # no registry: a bookworm base made from Debian
#                                    # packages (debootstrap, as root), imported as
#                                    # localhost/ldp-debian:bookworm
#   deploy/build-image.sh --base-only
#                                    # only the debootstrap base (scripts/install-system-deps.sh
#                                    # makes it, so tests/system/test_deploy.py can build the image)
#   LDP_BUILDER="buildah bud --isolation chroot" deploy/build-image.sh
#                                    # where containers cannot run (no cgroups or
#                                    # rlimits for an OCI runtime): RUN steps in a chroot
set -eu
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
BASE=${LDP_BASE:-docker.io/library/debian:bookworm-slim}
[ "${1:-}" = --base-only ] && BASE=debootstrap
TAG=${LDP_IMAGE:-localhost/ldp-telemetry:latest}

if [ "$BASE" = debootstrap ]; then
    BASE=localhost/ldp-debian:bookworm
    if ! podman image exists "$BASE"; then
        ROOT=$(mktemp -d /var/tmp/ldp-rootfs.XXXXXX)
        debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
            bookworm "$ROOT" "${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
        rm -rf "$ROOT"/var/lib/apt/lists/* "$ROOT"/var/cache/apt/*.bin
        tar -C "$ROOT" -c . | podman import --change 'CMD ["/bin/bash"]' - "$BASE"
        rm -rf "$ROOT"
    fi
fi
if [ "${1:-}" = --base-only ]; then echo "base $BASE"; exit 0; fi

rm -rf dist/wheels
# async-timeout: redis needs it on Python < 3.11.3 (Debian bookworm ships 3.11.2).
"$PYTHON" -m pip wheel --quiet --wheel-dir dist/wheels '.[server]' 'async-timeout>=4.0.3'
${LDP_BUILDER:-podman build} --build-arg "BASE=$BASE" -f Containerfile -t "$TAG" .
echo "built $TAG"
