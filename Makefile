# The two set-up commands of the README: `make demo` (the main job) and `make test` (the suite).
# Both create the virtual environment on first use. `make test` also installs, before pytest, the
# system components the suite needs (scripts/test-env.sh: apt-get as root; as another user one line
# per missing component, whose tests then skip); `make demo` needs none of them.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml requirements-dev.txt | cksum | cut -d' ' -f1)

.PHONY: demo test test-env lint typecheck unit bench bench-checkpoint clean

$(STAMP): pyproject.toml requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -r requirements-dev.txt -e .
	rm -f $(VENV)/.installed-*; touch $@

demo: $(STAMP)
	$(BIN)/gpulease launch examples/quickstart.yaml
	$(BIN)/gpulease down quickstart

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks scripts examples
	$(BIN)/ruff format --check src tests benchmarks scripts examples

typecheck: $(STAMP)
	$(BIN)/mypy

test-env:
	@PYTHON=$(PYTHON) scripts/test-env.sh

unit: $(STAMP) test-env
	$(BIN)/pytest -q -n 2 --dist loadgroup

test: lint typecheck unit

bench: $(STAMP)
	$(BIN)/python benchmarks/optimizer/run.py

bench-checkpoint: $(STAMP)
	$(BIN)/python benchmarks/checkpoint/run.py --json benchmarks/checkpoint/results/latest.json

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
