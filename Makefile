# sessiond build, test and code generation.
SHELL := /bin/bash
GO ?= go
PROTOC_VERSION := libprotoc 3.21.12
PROTO_DIR := api/proto
PROTO_FILES := $(shell find $(PROTO_DIR) -name '*.proto' | sort)

.PHONY: all build test test-go test-sweeps tools postgres grpcurl sdk sdk-ts sdk-py sdk-py-deps sdk-rb sdk-pkg systemd-analyze packages package-ts package-py package-rb install uninstall proto proto-check vet fmt-check fuzz fuzz-short bench bench-adapter clean test-adapters

all: build

# -buildvcs=true stamps the commit into the binaries (sessiond --version,
# sessionctl version), whatever GOFLAGS says.
build:
	$(GO) build -buildvcs=true -o bin/ ./cmd/...

# tools installs what the suite needs beyond Go: protoc (Debian's
# protobuf-compiler, which pins its version), the official TypeScript SDK
# (pinned in e2e/sdk/package-lock.json), the TypeScript adapter's packages
# (with the SDK's Claude Code CLI), the Python and Ruby adapters' Debian
# packages, when they are missing, Debian's Python packaging tools (sdk-pkg,
# for make packages), systemd-analyze (on Linux) and Debian's PostgreSQL
# server (postgres).
tools: sdk sdk-ts sdk-py sdk-py-deps sdk-rb sdk-pkg systemd-analyze grpcurl postgres
	@v="$$(protoc --version 2>/dev/null)"; if [ "$$v" != "$(PROTOC_VERSION)" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing protobuf-compiler"; (apt-get update -qq && apt-get install -y -qq protobuf-compiler) >/dev/null || exit 1; \
	  else echo "make needs $(PROTOC_VERSION) for the generated-code check (Debian: sudo apt-get install protobuf-compiler), found: '$$v'" >&2; exit 1; fi; \
	  v="$$(protoc --version)"; [ "$$v" = "$(PROTOC_VERSION)" ] || { echo "protoc is $$v, want $(PROTOC_VERSION)" >&2; exit 1; }; fi

# postgres installs Debian's postgresql package when no server binaries
# are found (internal/pgtest looks in $SESSIOND_PG_BIN, then
# /usr/lib/postgresql/*/bin, then PATH): the mirror's tests start a
# throwaway server with them, and never skip in CI or under make test.
postgres:
	@if [ -z "$$SESSIOND_PG_BIN" ] && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && ! command -v initdb >/dev/null; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing postgresql"; (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql) >/dev/null || exit 1; \
	  else echo "the mirror's tests need PostgreSQL's server binaries (initdb, postgres); Debian: sudo apt-get install postgresql (or set SESSIOND_PG_BIN to the folder holding them)" >&2; exit 1; fi; \
	  ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || { echo "postgresql installed, but no /usr/lib/postgresql/*/bin/initdb" >&2; exit 1; }; fi

# sdk installs the official TypeScript SDK (the reference reader the tests
# and the listing benchmark compare with) when it is missing.
sdk:
	@if [ ! -d e2e/sdk/node_modules/@anthropic-ai/claude-agent-sdk ]; then \
	  command -v npm >/dev/null || { echo "make needs node and npm for the official SDK tests" >&2; exit 1; }; \
	  npm ci --prefix e2e/sdk --no-audit --no-fund; fi

# grpcurl installs the pinned grpcurl into .bin: e2e runs the README's
# grpcurl commands with it.
GRPCURL_VERSION := v1.9.4
grpcurl:
	@test -x .bin/grpcurl || GOBIN=$(CURDIR)/.bin $(GO) install github.com/fullstorydev/grpcurl/cmd/grpcurl@$(GRPCURL_VERSION)

# sdk-ts installs the TypeScript SessionStore adapter's packages (its lock
# pins the SDK and the platform package with the real Claude Code CLI) and
# builds it when dist/ is missing or older than its sources: the agent tests
# drive the CLI through it.
TS := sdk/typescript
sdk-ts:
	@command -v npm >/dev/null || { echo "make needs node and npm for the TypeScript adapter" >&2; exit 1; }
	@if [ ! -d $(TS)/node_modules/@anthropic-ai/claude-agent-sdk-linux-x64 ]; then \
	  npm ci --prefix $(TS) --no-audit --no-fund; fi
	@if [ ! -f $(TS)/dist/index.js ] || [ -n "$$(find $(TS)/src $(TS)/tsconfig.json $(TS)/package-lock.json -newer $(TS)/dist/index.js -print -quit)" ]; then \
	  echo "npm run --prefix $(TS) build"; npm run --prefix $(TS) build; fi

# PY is the Python the adapter is tested with: Debian's, whose packages give
# grpcio, protobuf and pytest (the Python registry is not reachable here),
# and anyio and jsonschema, which the vendored official SDK the adapter's
# tests use as their oracle imports (../shared/vendor/SOURCES.md).
PY ?= /usr/bin/python3
PY_DEBS := python3-grpcio python3-protobuf python3-grpc-tools python3-pytest python3-anyio python3-jsonschema

# The vendored Python SDK needs anyio>=4 (its pyproject.toml); Debian 12
# has 3.6.2, with which it cannot start the CLI. Debian 13's python3-anyio
# (pure Python) and the typing_extensions it needs are fetched from the
# Debian archive and unpacked here, not installed, for the e2e test that
# runs the real CLI under the Python SDK (e2e/clisdk_test.go).
PYDEPS := $(CURDIR)/.bin/pydeps
PYDEPS_DEBS := python3-anyio/trixie python3-typing-extensions/trixie
sdk-py-deps:
	@test -f $(PYDEPS)/usr/lib/python3/dist-packages/anyio/__init__.py || { \
	  d=$$(mktemp -d) && mkdir -p $$d/lists/partial $$d/cache/archives/partial && \
	  echo 'deb http://deb.debian.org/debian trixie main' > $$d/sources.list && \
	  o="-o Dir::Etc::SourceList=$$d/sources.list -o Dir::Etc::SourceParts=/dev/null -o Dir::State::Lists=$$d/lists -o Dir::Cache=$$d/cache -o APT::Sandbox::User=$$(id -un)" && \
	  echo "fetching $(PYDEPS_DEBS) into .bin/pydeps" && \
	  apt-get -qq $$o update && (cd $$d && apt-get -qq $$o download $(PYDEPS_DEBS)) && \
	  mkdir -p $(PYDEPS) && for f in $$d/*.deb; do dpkg -x $$f $(PYDEPS) || exit 1; done; rc=$$?; rm -rf $$d; exit $$rc; }

sdk-py:
	@if ! $(PY) -c 'import grpc, google.protobuf, grpc_tools, pytest, anyio, jsonschema' 2>/dev/null; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing $(PY_DEBS)"; (apt-get update -qq && apt-get install -y -qq $(PY_DEBS)) >/dev/null || exit 1; \
	  else echo "the Python adapter's tests need $(PY_DEBS) (Debian: sudo apt-get install $(PY_DEBS))" >&2; exit 1; fi; fi

# RUBY is the Ruby the Ruby adapter is tested with: Debian's, whose packages
# give grpc (with googleapis' status protos), google-protobuf, the code
# generator (grpc_tools_ruby_protoc) and minitest (the Ruby registry is not
# reachable here), and async, which the vendored Ruby Agent SDK the
# adapter's tests use as their oracle requires (../shared/vendor/SOURCES.md).
RUBY ?= ruby
# ruby-rubygems gives gem, which make packages builds the gem with.
RB_DEBS := ruby ruby-rubygems ruby-async ruby-grpc ruby-grpc-tools ruby-google-protobuf

sdk-rb:
	@if ! $(RUBY) -e 'require "grpc"; require "google/protobuf"; require "async"; require "minitest"' 2>/dev/null || ! command -v grpc_tools_ruby_protoc >/dev/null || ! command -v gem >/dev/null; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing $(RB_DEBS)"; (apt-get update -qq && apt-get install -y -qq $(RB_DEBS)) >/dev/null || exit 1; \
	  else echo "the Ruby adapter needs $(RB_DEBS) (Debian: sudo apt-get install $(RB_DEBS))" >&2; exit 1; fi; fi

# sdk-pkg installs what make packages and e2e's package test need to build
# and install the Python wheel offline: Debian's pip, setuptools and wheel
# (built with no isolation, so nothing comes from the registry) and venv.
PKG_PY_DEBS := python3-pip python3-setuptools python3-wheel python3-venv

sdk-pkg:
	@if ! $(PY) -c 'import setuptools, wheel, venv, ensurepip' 2>/dev/null || ! $(PY) -m pip --version >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing $(PKG_PY_DEBS)"; (apt-get update -qq && apt-get install -y -qq $(PKG_PY_DEBS)) >/dev/null || exit 1; \
	  else echo "make packages needs $(PKG_PY_DEBS) (Debian: sudo apt-get install $(PKG_PY_DEBS))" >&2; exit 1; fi; fi

# systemd-analyze installs Debian's systemd package (only installed, not
# started) on Linux when systemd-analyze is missing: deploy's tests verify
# the units, as shipped and as make install writes them, with it.
systemd-analyze:
	@if [ "$$(uname -s)" = Linux ] && ! command -v systemd-analyze >/dev/null; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing systemd (for systemd-analyze)"; (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends systemd) >/dev/null || exit 1; \
	  else echo "deploy's tests need systemd-analyze (Debian: sudo apt-get install systemd)" >&2; exit 1; fi; fi

# packages builds the three SessionStore adapters as installable packages
# into PKGDIR (dist/, git-ignored), offline; package-ts, package-py and
# package-rb build one each:
# - package-ts: the npm tarball of sdk/typescript, npm pack of what sdk-ts
#   built (no lifecycle scripts, so it never rebuilds dist/ under a running
#   test);
# - package-py: the wheel of sdk/python, with Debian's setuptools, no build
#   isolation and no index, from a copy (no stale build/ folder leaks in);
# - package-rb: the gem of sdk/ruby.
# Each adapter's README installs from these files.
PKGDIR ?= dist
PKGOUT = $(abspath $(PKGDIR))

packages: package-ts package-py package-rb
	@ls -1 $(PKGOUT)/sessiond-store-*.tgz $(PKGOUT)/sessiond_store-*.whl $(PKGOUT)/sessiond_store-*.gem

package-ts: sdk-ts
	@mkdir -p $(PKGOUT) && rm -f $(PKGOUT)/sessiond-store-*.tgz
	cd $(TS) && npm pack --ignore-scripts --silent --pack-destination $(PKGOUT) >/dev/null

package-py: sdk-pkg
	@mkdir -p $(PKGOUT) && rm -f $(PKGOUT)/sessiond_store-*.whl
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && cp -R sdk/python/. "$$tmp" && rm -rf "$$tmp/build" "$$tmp"/*.egg-info && \
	  echo "$(PY) -m pip wheel --no-deps --no-build-isolation --no-index --wheel-dir $(PKGOUT) sdk/python" && \
	  $(PY) -m pip wheel --quiet --disable-pip-version-check --no-deps --no-build-isolation --no-index --wheel-dir $(PKGOUT) "$$tmp"

package-rb:
	@command -v gem >/dev/null || { echo "make package-rb needs ruby and gem (Debian: sudo apt-get install ruby; make tools installs it as root)" >&2; exit 1; }
	@mkdir -p $(PKGOUT) && rm -f $(PKGOUT)/sessiond_store-*.gem
	v=$$($(RUBY) -e 'load ARGV[0]; print SessiondStore::VERSION' sdk/ruby/lib/sessiond_store/version.rb) && \
	  gem build -C sdk/ruby --silent sessiond_store.gemspec --output $(PKGOUT)/sessiond_store-$$v.gem

# install builds sessiond and sessionctl with the commit stamped and
# installs them into BINDIR (PREFIX/bin, ~/.local/bin), then the service:
# on Linux the systemd user units into SYSTEMD_USER_DIR, with ExecStart=
# naming the installed binary, enabled (systemctl --user enable --now
# sessiond.socket) when a user manager runs, else it prints what to run;
# on macOS the LaunchAgent into LAUNCHD_DIR, bootstrapped. uninstall stops
# and removes exactly those files, never transcripts or the state folder.
# deploy/install.sh does both; deploy/README.md has the details.
PREFIX ?= $(HOME)/.local
BINDIR ?= $(PREFIX)/bin
SYSTEMD_USER_DIR ?= $(or $(XDG_CONFIG_HOME),$(HOME)/.config)/systemd/user
LAUNCHD_DIR ?= $(HOME)/Library/LaunchAgents
INSTALL_ENV = GO="$(GO)" PREFIX="$(PREFIX)" BINDIR="$(BINDIR)" SYSTEMD_USER_DIR="$(SYSTEMD_USER_DIR)" LAUNCHD_DIR="$(LAUNCHD_DIR)"

install:
	@$(INSTALL_ENV) deploy/install.sh install

uninstall:
	@$(INSTALL_ENV) deploy/install.sh uninstall

# proto regenerates the committed Go code with the pinned generators:
# protoc-gen-go and protoc-gen-go-grpc are go.mod tool entries, protoc is
# Debian's protobuf-compiler.
proto: tools
	$(GO) build -o .bin/protoc-gen-go google.golang.org/protobuf/cmd/protoc-gen-go
	$(GO) build -o .bin/protoc-gen-go-grpc google.golang.org/grpc/cmd/protoc-gen-go-grpc
	protoc -I $(PROTO_DIR) \
	  --plugin=protoc-gen-go=.bin/protoc-gen-go --go_out=$(PROTO_DIR) --go_opt=paths=source_relative \
	  --plugin=protoc-gen-go-grpc=.bin/protoc-gen-go-grpc --go-grpc_out=$(PROTO_DIR) --go-grpc_opt=paths=source_relative \
	  $(patsubst $(PROTO_DIR)/%,%,$(PROTO_FILES))
	npm run --prefix sdk/typescript gen
	PYTHON=$(PY) sdk/python/gen.sh
	sdk/ruby/gen.sh

# proto-check fails when the committed generated code differs from what the
# pinned generators produce.
GEN_DIRS := $(PROTO_DIR) sdk/typescript/src/gen sdk/python/sessiond_store/gen sdk/ruby/lib/sessiond_store/gen

proto-check: proto
	@git diff --exit-code -- $(GEN_DIRS) || { echo "generated protobuf code is stale: run make proto and commit" >&2; exit 1; }
	@test -z "$$(git status --porcelain -- $(GEN_DIRS))" || { git status --porcelain -- $(GEN_DIRS); echo "untracked generated files: run make proto and commit" >&2; exit 1; }

fmt-check:
	@out="$$(gofmt -l $$(git ls-files '*.go'))"; if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

# FUZZTIME is each fuzz target's budget in fuzz-short (`make test`): a
# number of executions, after the seed corpus, so that the step does the
# same work on any machine under any load and never stops on a deadline
# (Go 1.26's coordinator can report its own deadline as a failure: see
# scripts/fuzz.sh). `make fuzz` runs each target 5 minutes instead.
# FUZZPARALLEL sets the fuzzing workers per target (default one per CPU).
# scripts/fuzz.sh finds the targets.
FUZZTIME ?= 20000x

fuzz-short:
	GO=$(GO) FUZZPARALLEL=$(FUZZPARALLEL) scripts/fuzz.sh $(FUZZTIME)

fuzz:
	$(MAKE) fuzz-short FUZZTIME=5m

# test is the whole suite: generated code up to date, formatting and vet,
# then four independent parts at once, each part's output printed whole
# when it ends: every Go test with the race detector but the exhaustive
# crash and fault sweeps (test-go), those sweeps without it (test-sweeps),
# the adapters' suites (test-adapters), and fuzz-short with one fuzzing
# worker (it uses the CPU the tests leave idle while they wait on
# processes).
# The TypeScript adapter is rebuilt first if proto-check regenerated its
# sources, never while e2e's agent tests load it. About 10 minutes on 2
# cores from a fresh clone.
test: tools proto-check fmt-check vet
	@$(MAKE) --no-print-directory sdk-ts
	$(MAKE) --no-print-directory -j4 --output-sync=target test-go test-sweeps test-adapters fuzz-short FUZZPARALLEL=1

# test-go runs every Go test with the race detector (end-to-end tests build
# and run the real binaries).
#   -p 4 -parallel 4: four test binaries at once, and four parallel tests in
#     each; most end-to-end tests wait on processes (sessiond, sessionctl,
#     node), so more of them than cores keep 2 cores busy.
#   GORACE=atexit_sleep_ms=0: a program built with -race sleeps 1 s when it
#     exits, by default, so that goroutines still running can report a
#     race; over every test binary and the hundreds of sessionctl and
#     sessiond runs of e2e that was minutes. Races are still reported as
#     they happen (e2e's TestMain sets the same for the processes it starts).
#   SESSIOND_TEST_SIZE=small: internal/bench's tests drive their loads for a
#     fifth of the time, with the same assertions.
GOTESTFLAGS ?= -p 4 -parallel 4
GORACE ?= atexit_sleep_ms=0

#   -skip SWEEPS: test-sweeps runs those.
test-go:
	GORACE="$(GORACE)" SESSIOND_TEST_SIZE=small SESSIOND_REQUIRE_SDK=1 SESSIOND_REQUIRE_PG=1 $(GO) test -race -count=1 -timeout 30m $(GOTESTFLAGS) -skip '$(SWEEPS)' ./...

# SWEEPS are the exhaustive crash and fault sweeps of the journal and the
# writer: a power loss, then a fault, at every filesystem operation of each
# workload, and during recovery. test-sweeps runs them without the race
# detector: they drive the same writer code the race-detected tests drive
# concurrently, one operation point at a time, and under -race they were
# two thirds of the suite's time (10 of 15 minutes on 2 cores).
SWEEPS := ^(TestCrashEveryOperation|TestCrashDuringRecovery|TestFaultEveryOperation|TestFaultDuringRecovery)$$

test-sweeps:
	$(GO) test -count=1 -timeout 30m -run '$(SWEEPS)' ./internal/journal/ ./internal/writer/

# test-adapters runs the SessionStore adapters' own suites (conformance,
# round trips, retries, summaries, trust checks) against one freshly built
# daemon; the Python suite also runs the official Python SDK's conformance
# kit and store functions, vendored in ../shared/vendor (SESSIOND_REQUIRE_SDK
# fails them, rather than skipping, when it is missing), and the Ruby suite
# the Ruby SDK's kit, SessionResume and store functions, vendored there too
# (it fails when they are missing). The TypeScript adapter is type-checked, then tested as sdk-ts
# built it (npm test's pretest would rebuild dist/ while the agent tests of
# e2e may be loading it).
test-adapters: sdk-ts
	$(GO) build -o .bin/sessiond ./cmd/sessiond
	npm run --prefix $(TS) typecheck
	SESSIOND_BIN=$(CURDIR)/.bin/sessiond npm test --prefix $(TS) --ignore-scripts
	SESSIOND_BIN=$(CURDIR)/.bin/sessiond SESSIOND_REQUIRE_SDK=1 $(PY) -m pytest -q -p no:cacheprovider sdk/python/tests
	SESSIOND_BIN=$(CURDIR)/.bin/sessiond RUBY=$(RUBY) sdk/ruby/test/run

# bench runs the load tool's whole suite against a freshly built daemon,
# with the baselines measured in the same run, and rewrites the results
# section of BENCHMARKS.md; then bench-adapter. Not part of test. About 18
# minutes on 2 cores (the mirror scenario needs PostgreSQL: make tools).
bench: sdk
	$(GO) build -o bin/ ./cmd/sessiond ./cmd/sessiond-bench ./cmd/sessionctl
	bin/sessiond-bench --sessiond bin/sessiond --suite --inproc --verify --markdown BENCHMARKS.md $(BENCHFLAGS)
	$(MAKE) bench-adapter

# bench-adapter measures the TypeScript SessionStore adapter (built by
# sdk-ts): its appends against the Go client's (sessiond-bench --batch), and
# the official SDK's listSessions through it against sessiond's own
# ListSessions and against the SDK's one-load-per-session fallback, on a
# sessiond it starts in a temp folder and stops with SIGTERM. It rewrites
# the "SessionStore adapter" section of BENCHMARKS.md. About a minute.
bench-adapter: sdk-ts
	$(GO) build -o bin/ ./cmd/sessiond ./cmd/sessiond-bench
	node sdk/typescript/bench/adapter.mjs --sessiond bin/sessiond --bench bin/sessiond-bench --markdown BENCHMARKS.md $(ADAPTERBENCHFLAGS)

clean:
	rm -rf bin .bin dist
