# sessiond build, test and code generation.
SHELL := /bin/bash
GO ?= go
PROTOC_VERSION := libprotoc 3.21.12
PROTO_DIR := api/proto
PROTO_FILES := $(shell find $(PROTO_DIR) -name '*.proto' | sort)

.PHONY: all build test tools sdk proto proto-check vet fmt-check fuzz fuzz-short bench clean

all: build

build:
	$(GO) build -o bin/ ./cmd/...

# tools installs what the suite needs beyond Go: protoc (Debian's
# protobuf-compiler, which pins its version) and the official TypeScript SDK
# (pinned in e2e/sdk/package-lock.json) when they are missing.
tools: sdk
	@v="$$(protoc --version 2>/dev/null)"; if [ "$$v" != "$(PROTOC_VERSION)" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing protobuf-compiler"; (apt-get update -qq && apt-get install -y -qq protobuf-compiler) >/dev/null || exit 1; \
	  else echo "make needs $(PROTOC_VERSION) for the generated-code check (Debian: sudo apt-get install protobuf-compiler), found: '$$v'" >&2; exit 1; fi; \
	  v="$$(protoc --version)"; [ "$$v" = "$(PROTOC_VERSION)" ] || { echo "protoc is $$v, want $(PROTOC_VERSION)" >&2; exit 1; }; fi

# sdk installs the official TypeScript SDK (the reference reader the tests
# and the listing benchmark compare with) when it is missing.
sdk:
	@if [ ! -d e2e/sdk/node_modules/@anthropic-ai/claude-agent-sdk ]; then \
	  command -v npm >/dev/null || { echo "make needs node and npm for the official SDK tests" >&2; exit 1; }; \
	  npm ci --prefix e2e/sdk --no-audit --no-fund; fi

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

# proto-check fails when the committed generated code differs from what the
# pinned generators produce.
proto-check: proto
	@git diff --exit-code -- $(PROTO_DIR) || { echo "generated protobuf code is stale: run make proto and commit" >&2; exit 1; }
	@test -z "$$(git status --porcelain -- $(PROTO_DIR))" || { git status --porcelain -- $(PROTO_DIR); echo "untracked generated files: run make proto and commit" >&2; exit 1; }

fmt-check:
	@out="$$(gofmt -l $$(git ls-files '*.go'))"; if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

# FUZZTIME is how long each fuzz target runs in `make test`; `make fuzz`
# runs them longer. scripts/fuzz.sh finds the targets.
FUZZTIME ?= 10s

fuzz-short:
	GO=$(GO) scripts/fuzz.sh $(FUZZTIME)

fuzz:
	$(MAKE) fuzz-short FUZZTIME=5m

# test is the whole suite: generated code up to date, formatting, vet, every
# test with the race detector (end-to-end tests build and run the real
# binaries), then a short run of every fuzz target.
test: tools proto-check fmt-check vet
	SESSIOND_REQUIRE_SDK=1 $(GO) test -race -count=1 -timeout 30m ./...
	$(MAKE) fuzz-short

# bench runs the load tool's whole suite against a freshly built daemon,
# with the baselines measured in the same run, and rewrites the results
# section of BENCHMARKS.md. Not part of test. About 6 minutes on 2 cores.
bench: sdk
	$(GO) build -o bin/ ./cmd/sessiond ./cmd/sessiond-bench ./cmd/sessionctl
	bin/sessiond-bench --sessiond bin/sessiond --suite --inproc --verify --markdown BENCHMARKS.md $(BENCHFLAGS)

clean:
	rm -rf bin .bin
