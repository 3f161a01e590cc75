#!/usr/bin/env bash
# Builds deploy/Dockerfile with podman where no container registry is reachable.
#
#     bash deploy/tools/build-image.sh                  # -> localhost/queueflow:dev
#     QF_IMAGE=localhost/queueflow:0.6.0 bash deploy/tools/build-image.sh
#
# No image is pulled. The two base images are made from Debian bookworm packages with mmdebstrap,
# from the machine's own apt sources, and imported into podman:
#   runtime base  python3 (3.11) with ca-certificates, netbase, tzdata, passwd: the slim image's
#                 set, without apt, perl or documentation
#   builder base  the same plus python3-venv (ensurepip's pip and setuptools wheels)
# They go to the Dockerfile as PYTHON_IMAGE and BUILDER_IMAGE, so the Dockerfile is the one a
# registry build uses unchanged. pip inside the build installs the dependencies from PyPI.
#
# Needs root, podman, mmdebstrap (apt-get install podman mmdebstrap runc; runc where the cgroup
# layout is hybrid, see below). The base tarballs are cached (QF_IMAGE_CACHE) under a name that
# hashes their recipe, so a second run reuses them: a cold run takes a few minutes, a warm one
# only the podman build.
#
# Environment:
#   QF_IMAGE           tag to build (default localhost/queueflow:dev)
#   QF_IMAGE_CACHE     where the base tarballs are kept (default deploy/tools/cache, git-ignored)
#   QF_DEBIAN_MIRROR   mirror URL or apt sources file for mmdebstrap (default: the machine's
#                      /etc/apt/sources.list.d/debian.sources or /etc/apt/sources.list)
#   QF_BUILD_CA_BUNDLE CA bundle bind-mounted over the build containers' own during RUN steps
#                      (default: the host's /etc/ssl/certs/ca-certificates.crt), so pip trusts
#                      what the host trusts (a TLS-intercepting egress proxy); never committed
#   QF_OCI_RUNTIME     podman's OCI runtime (default: crun with a unified cgroup v2 layout,
#                      runc otherwise: crun refuses the hybrid v1/v2 layout)
#   QF_BASE_ONLY=1     stop after importing the base images
#
# The podman settings this needs beyond Debian's defaults come from podman-flags.sh (sourced
# below; the image tests use the same flags).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
# shellcheck source=deploy/tools/podman-flags.sh
source "$here/podman-flags.sh"

image="${QF_IMAGE:-localhost/queueflow:dev}"
cache="${QF_IMAGE_CACHE:-$here/cache}"
suite=bookworm

die() { echo "build-image: $*" >&2; exit 1; }

[[ "$(id -u)" -eq 0 ]] || die "run as root (mmdebstrap's root mode and rootful podman)"
for tool in podman mmdebstrap; do
    command -v "$tool" >/dev/null 2>&1 || die "$tool is missing: apt-get install podman mmdebstrap runc"
done

if [[ -n "${QF_DEBIAN_MIRROR:-}" ]]; then
    mirror="$QF_DEBIAN_MIRROR"
elif [[ -f /etc/apt/sources.list.d/debian.sources ]]; then
    mirror=/etc/apt/sources.list.d/debian.sources
elif [[ -s /etc/apt/sources.list ]]; then
    mirror=/etc/apt/sources.list
else
    mirror=http://deb.debian.org/debian
fi

runtime_packages=(python3 ca-certificates netbase tzdata passwd)
builder_packages=("${runtime_packages[@]}" python3-venv)

# No documentation, manual pages, locales or lintian overrides (copyright files stay).
dpkg_opts=(
    'path-exclude=/usr/share/doc/*'
    'path-include=/usr/share/doc/*/copyright'
    'path-exclude=/usr/share/man/*'
    'path-exclude=/usr/share/info/*'
    'path-exclude=/usr/share/locale/*'
    'path-exclude=/usr/share/lintian/*'
)

# The recipe of one base: what goes into the cache key.
recipe() {
    printf '%s\n' "suite=$suite" "variant=essential" "hook=merged-usr" "mirror=$(
        if [[ -f "$mirror" ]]; then sha256sum <"$mirror" | cut -c1-16; else echo "$mirror"; fi
    )" "$@" "${dpkg_opts[@]}"
}

# make_base NAME PACKAGE...: the tarball (cached) and the podman image (imported when missing).
make_base() {
    local name="$1"
    shift
    local key tarball tag
    key="$(recipe "$@" | sha256sum | cut -c1-12)"
    tarball="$cache/queueflow-base-$name-$suite-$key.tar"
    tag="localhost/queueflow-base-$name:$suite-$key"

    if [[ ! -s "$tarball" ]]; then
        mkdir -p "$cache"
        echo "build-image: mmdebstrap $name base ($*) from $mirror" >&2
        local opts=() opt
        for opt in "${dpkg_opts[@]}"; do opts+=("--dpkgopt=$opt"); done
        # variant=essential: Essential:yes packages and the listed ones, no apt. The merged-usr
        # hook sets up the merged /usr itself, so the usrmerge package (and perl) stay out.
        mmdebstrap --quiet --variant=essential --format=tar \
            --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
            --include="$(IFS=,; echo "$*")" "${opts[@]}" \
            "$suite" "$tarball.partial" "$mirror" >"$cache/mmdebstrap-$name.log" 2>&1 \
            || { tail -n 30 "$cache/mmdebstrap-$name.log" >&2; die "mmdebstrap failed (log: $cache/mmdebstrap-$name.log)"; }
        mv "$tarball.partial" "$tarball"
    fi

    if ! podman image exists "$tag"; then
        echo "build-image: importing $tarball as $tag" >&2
        # The configuration the python image has; a tarball import carries none, and the
        # Dockerfile's `ENV PATH=/opt/queueflow/bin:$PATH` needs a PATH to extend.
        podman import --quiet \
            --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
            --change 'ENV LANG=C.UTF-8' \
            --change 'CMD ["python3"]' \
            "$tarball" "$tag" >/dev/null
    fi
    echo "$tag"
}

start=$(date +%s)
runtime_base="$(make_base runtime "${runtime_packages[@]}")"
builder_base="$(make_base builder "${builder_packages[@]}")"
echo "build-image: bases $runtime_base, $builder_base ($(( $(date +%s) - start )) s)"
[[ "${QF_BASE_ONLY:-}" == 1 ]] && exit 0

build_opts=()
ca_bundle="${QF_BUILD_CA_BUNDLE-/etc/ssl/certs/ca-certificates.crt}"
if [[ -n "$ca_bundle" ]]; then
    [[ -f "$ca_bundle" ]] || die "QF_BUILD_CA_BUNDLE=$ca_bundle is not a file"
    build_opts+=(--volume "$ca_bundle:/etc/ssl/certs/ca-certificates.crt:ro")
fi

echo "build-image: podman build -f deploy/Dockerfile -t $image"
# --format docker keeps HEALTHCHECK (the OCI image format has no field for it).
# --pull=never: both bases are local; nothing may come from a registry.
# --ignorefile: podman 4.3 reads <context>/.dockerignore, not <Dockerfile>.dockerignore.
podman "${QF_PODMAN_GLOBAL_FLAGS[@]}" build \
    "${QF_PODMAN_RUN_FLAGS[@]}" \
    "${build_opts[@]}" \
    --format docker \
    --pull=never \
    --layers \
    --file "$repo/deploy/Dockerfile" \
    --ignorefile "$repo/deploy/Dockerfile.dockerignore" \
    --build-arg "PYTHON_IMAGE=$runtime_base" \
    --build-arg "BUILDER_IMAGE=$builder_base" \
    --tag "$image" \
    "$repo"

size="$(podman image inspect --format '{{.Size}}' "$image")"
echo "build-image: $image built in $(( $(date +%s) - start )) s, $(( size / 1000000 )) MB" \
    "(runtime base $(( $(podman image inspect --format '{{.Size}}' "$runtime_base") / 1000000 )) MB)"
