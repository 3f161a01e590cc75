#!/usr/bin/env bash
# Installs the pinned kustomize used by tests/deploy to render deploy/k8s/overlays.
#
#     bash deploy/tools/install-kustomize.sh          # -> deploy/tools/bin/kustomize
#
# kustomize is a Go module, built here with `go install` through the Go module proxy (no
# prebuilt download). A cold build takes about a minute on two cores; with Go's module and
# build caches warm it takes a few seconds, and when the pinned version is already installed
# the script returns at once. Environment:
#   KUSTOMIZE_VERSION   version to install (default: the pin below)
#   KUSTOMIZE_BIN_DIR   where to put the binary (default: deploy/tools/bin, git-ignored)
set -euo pipefail

KUSTOMIZE_VERSION="${KUSTOMIZE_VERSION:-v5.7.1}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=go-tools.sh
source "$here/go-tools.sh"
bin_dir="${KUSTOMIZE_BIN_DIR:-$here/bin}"
target="$bin_dir/kustomize"

if [[ -x "$target" ]] && [[ "$("$target" version 2>/dev/null || true)" == "$KUSTOMIZE_VERSION" ]]; then
    echo "kustomize $KUSTOMIZE_VERSION already at $target"
    exit 0
fi

use_go install-kustomize 1.22

mkdir -p "$bin_dir"
echo "installing kustomize $KUSTOMIZE_VERSION into $bin_dir (go install)"
start=$(date +%s)
go_install_retrying install-kustomize "$bin_dir" "sigs.k8s.io/kustomize/kustomize/v5@${KUSTOMIZE_VERSION}"

installed="$("$target" version)"
if [[ "$installed" != "$KUSTOMIZE_VERSION" ]]; then
    echo "install-kustomize: expected $KUSTOMIZE_VERSION, got $installed" >&2
    exit 1
fi
echo "kustomize $installed installed at $target in $(( $(date +%s) - start )) s"
