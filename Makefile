# dataloaderd: build, test, demo, generate. Every target installs what it needs
# into the repository (.venv for Python, .tools for the protoc plugins).
SHELL := /bin/bash
GO ?= go
PYTHON ?= python3
VENV := $(CURDIR)/.venv
PY := $(VENV)/bin/python
TOOLS := $(CURDIR)/.tools
BIN := $(CURDIR)/bin

# Pinned code generators: protoc comes from grpcio-tools, so Go and Python stubs
# share one compiler version.
GRPCIO_VERSION := 1.85.1
PROTOC_GEN_GO_VERSION := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.6.2
# Pinned linters: staticcheck for Go (make lint).
STATICCHECK_VERSION := v0.8.2

PROTO_DIR := api/proto/dataloader/v1
PY_PROTO_DIR := clients/python/src/dataloaderd/_proto

.DEFAULT_GOAL := all

# The tokenizer conformance targets and their variables (used by test-python).
include mk/tokenize.mk

.PHONY: all setup build test test-go test-python vet lint lint-go staticcheck bench bench-quick bench-go bench-spread demo generate generate-check clean

all: build

$(VENV)/.stamp: clients/python/pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q grpcio==$(GRPCIO_VERSION) grpcio-tools==$(GRPCIO_VERSION) \
		numpy==2.4.6 protobuf==7.36.2 pyyaml==6.0.3 pytest==9.2.0
	$(PY) -m pip install -q -e ./clients/python
	touch $@

$(TOOLS)/.stamp: Makefile
	GOBIN=$(TOOLS) $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	GOBIN=$(TOOLS) $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)
	GOBIN=$(TOOLS) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	touch $@

setup: $(VENV)/.stamp $(TOOLS)/.stamp

build:
	mkdir -p $(BIN)
	CGO_ENABLED=0 $(GO) build -o $(BIN)/dataloaderd ./cmd/dataloaderd

vet:
	$(GO) vet ./...

staticcheck: $(TOOLS)/.stamp
	$(TOOLS)/staticcheck ./...

# lint: every static check make test runs.
lint-go: vet staticcheck
lint: lint-go

test-go:
	$(GO) test -race -count=1 ./...

test-python: build $(VENV)/.stamp $(VENV)/.tokenize-stamp $(TOKENIZE_VOCAB)/.stamp
	DATALOADERD_BIN=$(BIN)/dataloaderd DATALOADERD_TOKENIZER_VOCAB=$(TOKENIZE_VOCAB) \
		$(PY) -m pytest -q clients/python/tests

test: setup generate-check generate-tokenize-check lint test-tokenize test-go test-python

# generate writes the Go and Python stubs into OUT (default: in place).
OUT ?= .
generate: setup
	mkdir -p $(OUT)/$(PROTO_DIR) $(OUT)/$(PY_PROTO_DIR)
	PATH=$(TOOLS):$$PATH $(PY) -m grpc_tools.protoc -I api/proto \
		--go_out=$(OUT)/api/proto --go_opt=paths=source_relative \
		--go-grpc_out=$(OUT)/api/proto --go-grpc_opt=paths=source_relative \
		dataloader/v1/dataloader.proto
	$(PY) -m grpc_tools.protoc -I dataloaderd/_proto=$(PROTO_DIR) \
		--python_out=$(OUT)/clients/python/src --pyi_out=$(OUT)/clients/python/src \
		--grpc_python_out=$(OUT)/clients/python/src \
		dataloaderd/_proto/dataloader.proto

# generate-check regenerates into a temp dir and fails when the committed code differs.
generate-check: setup
	tmp=$$(mktemp -d) && trap 'rm -rf $$tmp' EXIT && \
	$(MAKE) --no-print-directory generate OUT=$$tmp && \
	diff -ru $(PROTO_DIR) $$tmp/$(PROTO_DIR) -x '*.proto' && \
	diff -ru $(PY_PROTO_DIR) $$tmp/$(PY_PROTO_DIR) -x '__init__.py' -x '__pycache__' && \
	echo "generated code is up to date"

# The benchmark has an environment of its own for the loaders it compares
# against (torch, torchdata, mosaicml-streaming: several GB, so never part of
# make test). bench/requirements.txt pins every package in it.
BENCH_VENV := $(CURDIR)/bench/.venv
$(BENCH_VENV)/.stamp: bench/requirements.txt
	$(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/pip install -q -r bench/requirements.txt
	touch $@

# bench: one program, one table (docs/benchmarks.md); BENCH_ARGS passes flags,
# e.g. make bench BENCH_ARGS="--repeats 5".
bench: build $(VENV)/.stamp $(BENCH_VENV)/.stamp
	$(PY) scripts/bench.py --daemon $(BIN)/dataloaderd --peers-python $(BENCH_VENV)/bin/python $(BENCH_ARGS)

# bench-quick: the smoke run (tiny corpus, one repeat; peers only if bench/.venv exists).
bench-quick: build $(VENV)/.stamp
	$(PY) scripts/bench.py --quick --daemon $(BIN)/dataloaderd --peers-python $(BENCH_VENV)/bin/python $(BENCH_ARGS)

# bench-spread: every full run kept in bench/results/runs/ folded into one
# table of their spread (bench/results/spread.md and docs/benchmarks.md).
bench-spread:
	$(PYTHON) scripts/bench_spread.py --doc docs/benchmarks.md

# bench-go: the Go microbenchmarks on their small built-in corpora.
bench-go:
	$(GO) test -run '^$$' -bench . -benchmem ./internal/...

demo: build $(VENV)/.stamp
	$(PY) scripts/demo.py --daemon $(BIN)/dataloaderd


clean:
	rm -rf $(BIN) $(VENV) $(TOOLS) $(BENCH_VENV) bench/.corpus
