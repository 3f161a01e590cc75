#!/usr/bin/env bash
# Installs the pinned Helm used by tests/deploy to lint and render deploy/helm/queueflow.
#
#     bash deploy/tools/install-helm.sh               # -> deploy/tools/bin/helm
#
# Helm is a Go module, built here with `go install` through the Go module proxy (no prebuilt
# download). The pin needs Go 1.24 or newer. A cold build compiles Helm and a large part of
# client-go and takes a few minutes on two cores; with Go's module and build caches warm it
# takes seconds, and when the pinned version is already installed the script returns at once.
# Environment:
#   HELM_VERSION   version to install (default: the pin below)
#   HELM_BIN_DIR   where to put the binary (default: deploy/tools/bin, git-ignored)
set -euo pipefail

HELM_VERSION="${HELM_VERSION:-v3.19.5}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=go-tools.sh
source "$here/go-tools.sh"
bin_dir="${HELM_BIN_DIR:-$here/bin}"
target="$bin_dir/helm"

installed_version() {
    "$target" version --template '{{.Version}}' 2>/dev/null || true
}

if [[ -x "$target" ]] && [[ "$(installed_version)" == "$HELM_VERSION" ]]; then
    echo "helm $HELM_VERSION already at $target"
    exit 0
fi

use_go install-helm 1.24

# Helm's own release build stamps these with -ldflags (its Makefile): `go install` alone would
# report the version as "v3.19" and assume Kubernetes 1.20 for .Capabilities and lint's
# deprecation checks. Upstream derives it from the client-go the release is built with
# (v3.19.5: client-go v0.34.2, so Kubernetes 1.34). Keep it in step with the pin.
k8s_major=1
k8s_minor=34
ldflags="-s -w"
ldflags+=" -X helm.sh/helm/v3/internal/version.version=${HELM_VERSION}"
ldflags+=" -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
for pkg in helm.sh/helm/v3/pkg/chartutil helm.sh/helm/v3/pkg/lint/rules; do
    ldflags+=" -X ${pkg}.k8sVersionMajor=${k8s_major} -X ${pkg}.k8sVersionMinor=${k8s_minor}"
done

mkdir -p "$bin_dir"
echo "installing helm $HELM_VERSION into $bin_dir (go install)"
start=$(date +%s)
go_install_retrying install-helm "$bin_dir" -trimpath -ldflags "$ldflags" "helm.sh/helm/v3/cmd/helm@${HELM_VERSION}"

installed="$(installed_version)"
if [[ "$installed" != "$HELM_VERSION" ]]; then
    echo "install-helm: expected $HELM_VERSION, got $installed" >&2
    exit 1
fi
echo "helm $installed installed at $target in $(( $(date +%s) - start )) s"
