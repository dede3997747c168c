# `make test` and `make demo` work on a fresh machine: each builds .venv first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# torch is pinned and installed first: a CPU wheel of 2.13.0 is available, while an
# unpinned torch pulled in by a dependency brings gigabytes of CUDA packages.
TORCH := torch==2.13.0
TEST_EXTRAS := test,train,dense,ray

.PHONY: test demo venv clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed-test: setup.cfg pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet $(TORCH)
	$(BIN)/pip install --quiet -e ".[$(TEST_EXTRAS)]"
	touch $@

venv: $(VENV)/.installed-test

test: $(VENV)/.installed-test
	$(BIN)/pytest

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
