#!/usr/bin/env bash
# Installs the pinned Toxiproxy server used by tests/netfault to put network faults (latency,
# resets, partitions) between SDK workers and the API.
#
#     bash deploy/tools/install-toxiproxy.sh          # -> deploy/tools/bin/toxiproxy-server
#
# Toxiproxy is a Go module, built here with `go install` through the Go module proxy (no
# prebuilt download). A cold build takes under a minute on two cores; with Go's module and
# build caches warm it takes a few seconds, and when the pinned version is already installed
# the script returns at once. `go install` names the binary after its package directory
# (`server`), so it is built into a scratch directory and moved to its released name. The
# version is stamped with -ldflags the way upstream's release build does, so `-version` can
# be checked. Environment:
#   TOXIPROXY_VERSION   version to install (default: the pin below)
#   TOXIPROXY_BIN_DIR   where to put the binary (default: deploy/tools/bin, git-ignored)
set -euo pipefail

TOXIPROXY_VERSION="${TOXIPROXY_VERSION:-v2.12.0}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=go-tools.sh
source "$here/go-tools.sh"
bin_dir="${TOXIPROXY_BIN_DIR:-$here/bin}"
target="$bin_dir/toxiproxy-server"
# What `toxiproxy-server -version` prints for the pin (the version without its leading v).
expected="toxiproxy-server version ${TOXIPROXY_VERSION#v}"

if [[ -x "$target" ]] && [[ "$("$target" -version 2>/dev/null || true)" == "$expected" ]]; then
    echo "toxiproxy-server $TOXIPROXY_VERSION already at $target"
    exit 0
fi

use_go install-toxiproxy 1.23

mkdir -p "$bin_dir"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
echo "installing toxiproxy-server $TOXIPROXY_VERSION into $bin_dir (go install)"
start=$(date +%s)
ldflags="-s -w -X github.com/Shopify/toxiproxy/v2.Version=${TOXIPROXY_VERSION#v}"
go_install_retrying install-toxiproxy "$scratch" -ldflags "$ldflags" "github.com/Shopify/toxiproxy/v2/cmd/server@${TOXIPROXY_VERSION}"
mv -f "$scratch/server" "$target"

installed="$("$target" -version)"
if [[ "$installed" != "$expected" ]]; then
    echo "install-toxiproxy: expected '$expected', got '$installed'" >&2
    exit 1
fi
echo "toxiproxy-server $TOXIPROXY_VERSION installed at $target in $(( $(date +%s) - start )) s"
