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
# Pinned linters (make lint): staticcheck for Go; mypy and the stub packages of
# the client's dependencies for Python.
STATICCHECK_VERSION := v0.8.2
MYPY_VERSION := 2.4.1
TYPES_GRPCIO_VERSION := 1.85.0.20261028
TYPES_PROTOBUF_VERSION := 7.35.1.20260906
TYPES_PYYAML_VERSION := 6.0.12.20261113
# Pinned generator of the typed gRPC stub (dataloader_pb2_grpc.pyi): grpcio-tools
# writes the .py without annotations.
MYPY_PROTOBUF_VERSION := 5.1.0
# Pinned validator of the Kubernetes manifests (tests/test_deploy.py).
KUBERNETES_VALIDATE_VERSION := 1.37.0
# Pinned S3-compatible server the object-storage tests run against
# (internal/objstore/s3test): versitygw, Apache-2.0, built from the Go module
# proxy into $(TOOLS).
VERSITYGW_VERSION := v1.8.0

# Pinned promtool, which checks the shipped alerting rules (make test-alerts)
# and fires them on a starved job's real metrics (tests/test_waits.py): from
# Debian 12's prometheus package (2.42), unpacked into $(TOOLS) in seconds;
# where apt cannot fetch it, built from the Go module of Prometheus 3.16
# (minutes: its module graph is large; checked to build with this Go).
PROMETHEUS_DEB_VERSION := 2.42.0+ds-5+deb12u1
PROMETHEUS_GO_VERSION := v0.316.0

# The environment of the tests with real PyTorch and Hugging Face transformers
# (make test-torch; several GB, since the package index's torch is the CUDA
# build, used on the CPU here). Pinned.
TORCH_VENV := $(CURDIR)/.venv-torch
TORCH_VERSION := 2.15.0
TRANSFORMERS_VERSION := 5.23.0
# The trainers the client's adapters are tested against (docs/trainers.md),
# each pinned: Hugging Face accelerate, Lightning, torchtitan; and torchft,
# whose replica groups fail and heal in tests_torch/test_torchft.py.
ACCELERATE_VERSION := 1.15.0
LIGHTNING_VERSION := 2.6.6
TORCHTITAN_VERSION := 0.3.0
TORCHFT_VERSION := 0.2.0

PROTO_DIR := api/proto/dataloader/v1
PY_PROTO_DIR := clients/python/src/dataloaderd/_proto
# The ring control block's layout: one spec, and what layoutgen makes of it.
RING_SPEC := api/ring/v1/control_block.json
RING_LAYOUT := internal/ring/layout.go clients/python/src/dataloaderd/_ring_layout.py docs/control-block.md

.DEFAULT_GOAL := all

# The tokenizer conformance targets and their variables (used by test-python).
include mk/tokenize.mk

.PHONY: all setup build test test-go-beside-torch-env test-alerts fuzz-short soak soak-short image image-check slurm-check test-go test-python test-torch vet lint lint-go lint-python staticcheck bench bench-quick bench-go bench-objects bench-spread demo generate generate-check clean

all: build

$(VENV)/.stamp: clients/python/pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q grpcio==$(GRPCIO_VERSION) grpcio-tools==$(GRPCIO_VERSION) \
		numpy==2.4.6 protobuf==7.36.2 pyyaml==6.0.3 pytest==9.2.0 \
		mypy==$(MYPY_VERSION) mypy-protobuf==$(MYPY_PROTOBUF_VERSION) types-grpcio==$(TYPES_GRPCIO_VERSION) \
		types-protobuf==$(TYPES_PROTOBUF_VERSION) types-PyYAML==$(TYPES_PYYAML_VERSION) \
		kubernetes-validate==$(KUBERNETES_VALIDATE_VERSION)
	$(PY) -m pip install -q -e ./clients/python
	touch $@

$(TOOLS)/.stamp: Makefile
	GOBIN=$(TOOLS) $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	GOBIN=$(TOOLS) $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)
	GOBIN=$(TOOLS) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	touch $@

# A file target: built once, then reused until make clean.
$(TOOLS)/versitygw:
	GOBIN=$(TOOLS) $(GO) install github.com/versity/versitygw/cmd/versitygw@$(VERSITYGW_VERSION)

# A file target, like versitygw.
$(TOOLS)/promtool:
	rm -rf $(TOOLS)/deb && mkdir -p $(TOOLS)/deb
	if (cd $(TOOLS)/deb && apt-get download -q prometheus=$(PROMETHEUS_DEB_VERSION) && dpkg-deb -x prometheus_*.deb x); then \
		cp $(TOOLS)/deb/x/usr/bin/promtool $(TOOLS)/promtool; \
	else \
		GOBIN=$(TOOLS) $(GO) install github.com/prometheus/prometheus/cmd/promtool@$(PROMETHEUS_GO_VERSION); \
	fi
	rm -rf $(TOOLS)/deb

setup: $(VENV)/.stamp $(TOOLS)/.stamp $(TOOLS)/versitygw $(TOOLS)/promtool

# DATALOADERD_VERSION is what `dataloaderd version` prints: the git describe
# of this checkout. Outside a git checkout it is empty and the binary reports
# the revision Go recorded, if any, else "dev". Override it to name a release.
DATALOADERD_VERSION ?= $(shell git -C $(CURDIR) describe --tags --always --dirty 2>/dev/null)

build:
	mkdir -p $(BIN)
	CGO_ENABLED=0 $(GO) build -ldflags "$(if $(DATALOADERD_VERSION),-X main.version=$(DATALOADERD_VERSION))" \
		-o $(BIN)/dataloaderd ./cmd/dataloaderd

vet:
	$(GO) vet ./...

staticcheck: $(TOOLS)/.stamp
	$(TOOLS)/staticcheck ./...

# lint-python: mypy --strict over the client and the scripts that import it
# (the files and settings are in mypy.ini).
lint-python: $(VENV)/.stamp
	$(PY) -m mypy

# lint: every static check make test runs.
lint-go: vet staticcheck
lint: lint-go lint-python

test-go: $(TOOLS)/versitygw
	DATALOADERD_S3_SERVER=$(TOOLS)/versitygw $(GO) test -race -count=1 ./...

test-python: build $(VENV)/.stamp $(VENV)/.tokenize-stamp $(TOKENIZE_VOCAB)/.stamp $(TOOLS)/versitygw $(TOOLS)/promtool
	DATALOADERD_BIN=$(BIN)/dataloaderd DATALOADERD_TOKENIZER_VOCAB=$(TOKENIZE_VOCAB) DATALOADERD_S3_SERVER=$(TOOLS)/versitygw \
		DATALOADERD_PROMTOOL=$(TOOLS)/promtool \
		$(PY) -m pytest -q clients/python/tests

$(TORCH_VENV)/.stamp: clients/python/pyproject.toml Makefile
	$(PYTHON) -m venv $(TORCH_VENV)
	$(TORCH_VENV)/bin/pip install -q --upgrade pip
	$(TORCH_VENV)/bin/pip install -q torch==$(TORCH_VERSION) transformers==$(TRANSFORMERS_VERSION) \
		accelerate==$(ACCELERATE_VERSION) lightning==$(LIGHTNING_VERSION) torchtitan==$(TORCHTITAN_VERSION) \
		torchft==$(TORCHFT_VERSION) grpcio==$(GRPCIO_VERSION) numpy==2.4.6 protobuf==7.36.2 pyyaml==6.0.3 pytest==9.2.0
	$(TORCH_VENV)/bin/pip install -q -e ./clients/python
	touch $@

# test-torch: the client under real PyTorch: examples/train_gpt.py under
# torchrun through deploy/torchrun-with-dataloaderd.sh (DDP on gloo, DCP,
# kill -9, a resume on another world size; once with its corpus on the S3
# server), and Hugging Face's conventions.
test-torch: build $(TORCH_VENV)/.stamp $(TOOLS)/versitygw
	DATALOADERD_BIN=$(BIN)/dataloaderd DATALOADERD_S3_SERVER=$(TOOLS)/versitygw $(TORCH_VENV)/bin/python -m pytest -q clients/python/tests_torch

# test-alerts: the shipped alerting rules are valid, and fire (and stay
# quiet) as their unit tests say.
test-alerts: $(TOOLS)/promtool
	$(TOOLS)/promtool check config deploy/prometheus.yml
	cd deploy && $(TOOLS)/promtool test rules prometheus-alerts_test.yml

# test-go-beside-torch-env: the Go tests while the torch environment is
# made (its download and unpacking mostly wait on the network and the disk).
test-go-beside-torch-env:
	$(MAKE) -j2 test-go $(TORCH_VENV)/.stamp

test: setup generate-check generate-tokenize-check lint test-tokenize test-go-beside-torch-env fuzz-short test-alerts test-python test-torch soak-short

# A bounded run of the fuzz target that resumes a real corpus from forged
# states (internal/stream/fuzz_restore_test.go): no panic, no hang.
fuzz-short:
	$(GO) test -run '^$$' -fuzz FuzzRestore -fuzztime 15s ./internal/stream

# The fault soak (scripts/soak/soak.py): random kill -9 of the daemon and of
# ranks, mixture schedules and queued set_weights, an S3 store (versitygw
# behind a fault proxy) that restarts, throttles, lies about sizes and
# ignores Range, and misbehaving clients, beside jobs that must get every
# token exactly once. make test runs a short one; make soak a long one.
# SOAK_FAULTS picks the faults (soak.py --faults: all, or names; -name
# leaves one out).
SOAK_SECONDS ?= 600
SOAK_FAULTS ?= all
soak: build $(VENV)/.stamp $(TOOLS)/versitygw
	$(PY) scripts/soak/soak.py --bin $(BIN)/dataloaderd --s3-server $(TOOLS)/versitygw --faults '$(SOAK_FAULTS)' \
		--seconds $(SOAK_SECONDS) --report soak-report.json

soak-short: build $(VENV)/.stamp $(TOOLS)/versitygw
	$(PY) scripts/soak/soak.py --bin $(BIN)/dataloaderd --s3-server $(TOOLS)/versitygw --faults '$(SOAK_FAULTS)' --seconds 30

# generate writes the Go and Python stubs, and the ring layout's constants
# and doc, into OUT (default: in place).
OUT ?= .
generate: setup
	mkdir -p $(OUT)/$(PROTO_DIR) $(OUT)/$(PY_PROTO_DIR) $(OUT)/internal/ring $(OUT)/clients/python/src/dataloaderd $(OUT)/docs
	$(GO) run ./internal/ring/layoutgen -spec $(RING_SPEC) -go $(OUT)/internal/ring/layout.go \
		-py $(OUT)/clients/python/src/dataloaderd/_ring_layout.py -md $(OUT)/docs/control-block.md
	PATH=$(TOOLS):$$PATH $(PY) -m grpc_tools.protoc -I api/proto \
		--go_out=$(OUT)/api/proto --go_opt=paths=source_relative \
		--go-grpc_out=$(OUT)/api/proto --go-grpc_opt=paths=source_relative \
		dataloader/v1/dataloader.proto
	$(PY) -m grpc_tools.protoc -I dataloaderd/_proto=$(PROTO_DIR) \
		--python_out=$(OUT)/clients/python/src \
		--plugin=protoc-gen-mypy=$(VENV)/bin/protoc-gen-mypy --mypy_out=$(OUT)/clients/python/src \
		--grpc_python_out=$(OUT)/clients/python/src \
		--plugin=protoc-gen-mypy_grpc=$(VENV)/bin/protoc-gen-mypy_grpc --mypy_grpc_out=$(OUT)/clients/python/src \
		dataloaderd/_proto/dataloader.proto

# generate-check regenerates into a temp dir and fails when the committed code differs.
generate-check: setup
	tmp=$$(mktemp -d) && trap 'rm -rf $$tmp' EXIT && \
	$(MAKE) --no-print-directory generate OUT=$$tmp && \
	diff -ru $(PROTO_DIR) $$tmp/$(PROTO_DIR) -x '*.proto' && \
	diff -ru $(PY_PROTO_DIR) $$tmp/$(PY_PROTO_DIR) -x '__init__.py' -x '__pycache__' && \
	for f in $(RING_LAYOUT); do diff -u $$f $$tmp/$$f || exit 1; done && \
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
	$(MAKE) bench-objects

# bench-quick: the smoke run (tiny corpus, one repeat; peers only if bench/.venv exists).
bench-quick: build $(VENV)/.stamp
	$(PY) scripts/bench.py --quick --daemon $(BIN)/dataloaderd --peers-python $(BENCH_VENV)/bin/python $(BENCH_ARGS)

# bench-spread: every full run kept in bench/results/runs/ folded into one
# table of their spread (bench/results/spread.md and docs/benchmarks.md).
bench-spread:
	$(PYTHON) scripts/bench_spread.py --doc docs/benchmarks.md

# bench-objects: s3:// datasets read from a real S3-compatible server
# (versitygw), with and without 20 ms of latency and with a cache of half the
# corpus, next to the same corpus on local disk: requests and bytes per node
# for 1, 2 and 8 ranks, tokens/s, time to the first batch (BenchmarkObjectsNode);
# then at scale (BenchmarkObjectsScale): a run_tokens job over corpora 1, 10
# and 100 times the cache its working set documents (up to 0.9 GiB), 1 and 8
# ranks, 0 and 50 ms a request: fetched/read, GETs, tokens/s, first batch,
# peak RSS, and a disk cache across a restart (docs/benchmarks.md). About 10
# minutes on 2 cores shared with other work (4 for Node, 6 for Scale).
bench-objects: $(TOOLS)/versitygw
	DATALOADERD_S3_SERVER=$(TOOLS)/versitygw $(GO) test -run '^$$' -bench 'BenchmarkObjects(Node|Scale)$$' -benchtime 1x -timeout 60m ./internal/stream

# bench-go: the Go microbenchmarks on their small built-in corpora.
bench-go:
	$(GO) test -run '^$$' -bench . -benchmem ./internal/...

demo: build $(VENV)/.stamp
	$(PY) scripts/demo.py --daemon $(BIN)/dataloaderd


clean:
	rm -rf $(BIN) $(VENV) $(TOOLS) $(TORCH_VENV) $(BENCH_VENV) bench/.corpus

# The daemon's image (Dockerfile), with the first container tool that works
# here (answers its info command): a Docker engine, podman, or buildah;
# CONTAINER_TOOL=podman (say) picks one. Where crun refuses a hybrid cgroup
# hierarchy, BUILDAH_ISOLATION=chroot lets buildah run the build's RUN steps.
IMAGE ?= dataloaderd:$(or $(DATALOADERD_VERSION),dev)
CONTAINER_TOOL ?=
image:
	@tool='$(CONTAINER_TOOL)'; \
	if [ -z "$$tool" ]; then \
		for t in docker podman buildah; do $$t info >/dev/null 2>&1 && { tool=$$t; break; }; done; \
	fi; \
	if [ -z "$$tool" ]; then echo "make image: no container tool works here (none of docker, podman, buildah answers its info command)" >&2; exit 2; fi; \
	echo "$$tool build -t $(IMAGE)"; \
	$$tool build --build-arg DATALOADERD_VERSION=$(DATALOADERD_VERSION) -t $(IMAGE) .

# The image built and run offline (scripts/image-check.sh, root, buildah):
# stand-ins for its base images, made from this machine's Go and glibc in a
# container store of its own, since no container registry may be reachable.
image-check: build
	scripts/image-check.sh

# A one-node Slurm cluster from Debian's packages on this machine, and the
# sbatch recipe of deploy/slurm run on it for real (needs root). It trains
# examples/train_gpt.py, so it needs torch in $(TORCH_VENV) (make test-torch).
slurm-check: build
	TORCH_VENV=$(TORCH_VENV) scripts/slurm-check.sh
