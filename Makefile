# Every target creates .venv if absent and installs the project into it; safe to rerun.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test bench lint venv compile clean

# `pip install -e` also compiles the core's hot modules with mypyc (setup.py; GPUPLAN_NO_COMPILE=1: source only)
$(STAMP): pyproject.toml setup.py
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

# after editing a compiled module (gpuplan/compiled.py lists them): rebuild, else its source runs (slower)
compile: $(STAMP)
	$(BIN)/python -m pip install -q --no-deps -e .

demo: $(STAMP)
	$(BIN)/gpuplan demo --out out/demo

test: $(STAMP)
	$(BIN)/python -m pytest -q

bench: $(STAMP)
	$(BIN)/python bench/run.py

lint: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench
	$(BIN)/mypy src/gpuplan --ignore-missing-imports

clean:
	rm -rf $(VENV) out .pytest_cache build
	find src -name '*.so' -delete
