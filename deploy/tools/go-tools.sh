# Shared by the install-*.sh scripts, which source it: each pinned tool is built with `go install`
# through the Go module proxy (no prebuilt download).

# use_go SCRIPT MIN_GO: put Go on PATH (Debian's /usr/local/go when it is not there yet) or fail.
use_go() {
    if command -v go >/dev/null 2>&1; then
        return 0
    fi
    if [[ -x /usr/local/go/bin/go ]]; then
        export PATH="/usr/local/go/bin:$PATH"
        return 0
    fi
    echo "$1: 'go' is not on PATH; install Go $2 or newer first" >&2
    exit 1
}

# go_install_retrying SCRIPT GOBIN ARGS...: `go install ARGS` into GOBIN, three tries 5 s apart
# (the module proxy is a network). GOTOOLCHAIN=local: fail loudly rather than fetch another Go.
go_install_retrying() {
    local script="$1" gobin="$2" attempt
    shift 2
    for attempt in 1 2 3; do
        if GOBIN="$gobin" GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -buildvcs=false" \
            go install "$@"; then
            return 0
        fi
        if [[ $attempt -eq 3 ]]; then
            echo "$script: go install failed three times" >&2
            exit 1
        fi
        echo "$script: go install failed (attempt $attempt), retrying in 5 s" >&2
        sleep 5
    done
}
