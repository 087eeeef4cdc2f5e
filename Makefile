# One venv, created on first use; every target installs what it needs from pyproject.toml.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test check fmt lint types bench screenshots clean

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

# The demo batch fails a child or two on purpose (exit 1) and "stop all and quit" exits 130:
# neither is a failure of the demo itself; bad input (2) still is.
demo: $(STAMP)
	@$(VENV)/bin/flightdeck run examples/demo.toml --config examples/flightdeck.toml; \
	code=$$?; [ $$code -eq 0 ] || [ $$code -eq 1 ] || [ $$code -eq 130 ] || [ $$code -eq 143 ] || exit $$code

test: $(STAMP)
	$(PY) -m pytest -q

fmt: $(STAMP)
	$(VENV)/bin/ruff format src tests

lint: $(STAMP)
	$(VENV)/bin/ruff format --check src tests
	$(VENV)/bin/ruff check src tests

types: $(STAMP)
	$(VENV)/bin/mypy

check: lint types test

bench: $(STAMP)
	$(PY) tests/bench/run.py $(BENCH)

screenshots: $(STAMP)
	$(PY) scripts/screenshots.py

clean:
	rm -rf $(VENV) .flightdeck .pytest_cache .mypy_cache .ruff_cache
