#!/usr/bin/env bash
# Builds the OpenID provider that tests/oidc signs in against: tests/oidc/provider, a small Go
# program around zitadel/oidc's OpenID provider (github.com/zitadel/oidc/v3, pinned with its
# dependencies in tests/oidc/provider/go.mod and go.sum) that the tests configure with clients,
# users and claims, token lifetimes and signing keys (RS256, ES256, rotation).
#
#     bash deploy/tools/install-oidc-provider.sh     # -> deploy/tools/bin/qf-oidc-provider
#
# The modules come through the Go module proxy (no prebuilt download); a cold build takes under a
# minute on two cores. The binary is rebuilt only when the program's sources change (a digest of
# them is kept beside it). Environment:
#   OIDC_PROVIDER_BIN_DIR   where to put the binary (default: deploy/tools/bin, git-ignored)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=go-tools.sh
source "$here/go-tools.sh"
src="$(cd "$here/../../tests/oidc/provider" && pwd)"
bin_dir="${OIDC_PROVIDER_BIN_DIR:-$here/bin}"
target="$bin_dir/qf-oidc-provider"
digest="$(cat "$src/go.mod" "$src/go.sum" "$src"/*.go | sha256sum | cut -d' ' -f1)"

if [[ -x "$target" ]] && [[ "$(cat "$target.sha256" 2>/dev/null || true)" == "$digest" ]]; then
    echo "qf-oidc-provider already at $target"
    exit 0
fi

use_go install-oidc-provider 1.26

mkdir -p "$bin_dir"
echo "building qf-oidc-provider into $bin_dir (go build, modules from the proxy)"
start=$(date +%s)
for attempt in 1 2 3; do
    if (cd "$src" && GOTOOLCHAIN=local CGO_ENABLED=0 go build -buildvcs=false -trimpath -o "$target.new" .); then
        break
    fi
    if [[ $attempt -eq 3 ]]; then
        echo "install-oidc-provider: go build failed three times" >&2
        exit 1
    fi
    echo "install-oidc-provider: go build failed (attempt $attempt), retrying in 5 s" >&2
    sleep 5
done
mv -f "$target.new" "$target"
echo "$digest" > "$target.sha256"
echo "qf-oidc-provider installed at $target in $(( $(date +%s) - start )) s"
