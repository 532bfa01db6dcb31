# The two commands:  `make train` (set up + default run)  and  `make test`.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin

.PHONY: train test install bench clean

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

test: install
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) runs .cache
