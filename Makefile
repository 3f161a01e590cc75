# QueueFlow (Python). Two commands on a fresh machine: `make run` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install tools lock run test test-sdks image image-test bench bench-peers bench-compare bench-dbtime soak schema lint fmt clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]' --config-settings editable_mode=compat
	touch $(STAMP)

install: $(STAMP)

# requirements.lock: the server's dependencies (pyproject.toml's) and its build backend
# ([build-system] requires), each pinned with the hashes of its files on PyPI, resolved for Python
# 3.11 on every platform; the image installs it with --require-hashes (deploy/Dockerfile). Run it
# after changing either list: pins already in the lock stay unless ARGS=--upgrade (or
# ARGS='--upgrade-package NAME'). tests/deploy/test_requirements_lock.py checks that it covers both.
UV_VERSION := 0.13.9
lock: $(STAMP)
	$(BIN)/pip install -q 'uv==$(UV_VERSION)'
	$(BIN)/python -c "import tomllib; print(*tomllib.load(open('pyproject.toml', 'rb'))['build-system']['requires'], sep='\n')" \
		| $(BIN)/uv pip compile --quiet pyproject.toml - --universal --python-version 3.11 \
			--generate-hashes --custom-compile-command 'make lock' -o requirements.lock $(ARGS)

# QueueFlow with an embedded PostgreSQL in dev mode (or DATABASE_URL when set).
run: $(STAMP)
	$(BIN)/python -m devkit.devrun

# The whole suite against a PostgreSQL that the tests start themselves: the server's tests, the
# SDK conformance suite (tests/sdk builds every SDK and runs its runner against a real server),
# then each SDK's own tests with its own toolchain.
test: lint tools
	$(BIN)/python -m pytest -n 2 --dist loadgroup -q
	$(MAKE) test-sdks

# Tools the tests run that no package manager of the venv provides, each pinned and built from
# the Go module proxy (a no-op once installed): kustomize and Helm for the deploy tests, Toxiproxy
# for the network-fault tests (tests/netfault), and the OpenID provider the sign-in tests use (tests/oidc).
tools:
	bash deploy/tools/install-kustomize.sh
	bash deploy/tools/install-helm.sh
	bash deploy/tools/install-toxiproxy.sh
	bash deploy/tools/install-oidc-provider.sh

test-sdks: $(STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider sdks/python/tests
	cd sdks/typescript && npm install --no-audit --no-fund --loglevel=error && npm test
	cd sdks/go && go vet ./... && go test ./...
	cd sdks/rust && cargo test --quiet

# The container image without a registry: deploy/tools/build-image.sh makes Debian bookworm base
# images with mmdebstrap (cached) and builds deploy/Dockerfile on them with podman. Root only;
# needs podman, mmdebstrap (and runc where crun refuses the cgroup layout).
IMAGE ?= localhost/queueflow:dev
image:
	QF_IMAGE=$(IMAGE) bash deploy/tools/build-image.sh

# That image run as the Kubernetes manifests run it, every mode against a real PostgreSQL
# (tests/image, which the plain `pytest` run skips).
image-test: image tools $(STAMP)
	QF_IMAGE_TEST=$(IMAGE) $(BIN)/python -m pytest -q -p no:cacheprovider tests/image

bench: $(STAMP)
	$(BIN)/python -m bench

# The peers for bench-compare: graphile-worker and pg-boss (npm ci into bench/peers/node_modules,
# with Node 22 from npm when the system Node is older), PgQueuer (its own venv, bench/peers/.venv)
# and upstream's Rust server (`cargo install queueflow --version 0.6.0 --locked
# --ignore-rust-version --root bench/peers/rust`: several minutes the first time, then cached; where
# cargo is missing or the build fails, bench/peers/rust/not-built.txt says why and bench-compare
# skips it). Each step is a no-op once done; `.venv/bin/python -m bench.peers.install --force` redoes them.
bench-peers: $(STAMP)
	$(BIN)/python -m bench.peers.install

# QueueFlow beside upstream's Rust server, graphile-worker, pg-boss and PgQueuer
# (docs/benchmarks.md, "The comparison").
# ARGS passes options through, e.g. `make bench-compare ARGS=--quick`.
bench-compare: bench-peers
	$(BIN)/python -m bench.compare $(ARGS)

# Where each system's in-process drain spends PostgreSQL's time, statement by statement
# (pg_stat_statements; docs/benchmarks.md, "Where the database's time goes").
bench-dbtime: bench-peers
	$(BIN)/python -m bench.dbtime $(ARGS)

# The soak (not part of `test`): SOAK_MINUTES (default 30) of mixed load against real server
# processes with a SIGKILL of one service every 2 minutes; report in bench/out/soak/ (soak.md,
# soak.json), figures in docs/operations.md ("Soak"). Exits 1 on a lost job or an unexplained
# duplicate execution.
soak: $(STAMP)
	SOAK_MINUTES=$(or $(SOAK_MINUTES),30) $(BIN)/python -m bench.soak $(ARGS)

# shared/db/schema.sql, the schema the migrations make (for reading; devkit/schema.py replays them in
# a throwaway PostgreSQL). Run it after adding or changing a migration, and commit the file:
# tests/db/test_schema_file.py fails while it differs. `make schema ARGS=--check` only compares.
schema: $(STAMP)
	$(BIN)/python -m devkit.schema $(ARGS)

# Style, types and layers: ruff (lint and format), mypy over services/ and shared/ (strict on the
# domain and db layers), and import-linter's layer contracts (pyproject.toml, docs/architecture.md).
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

fmt: $(STAMP)
	$(BIN)/ruff format .

clean:
	rm -rf $(VENV) .qfdata .pytest_cache bench/peers/node_modules bench/peers/.venv bench/peers/rust
