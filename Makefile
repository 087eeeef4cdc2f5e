# One venv, created on first use; every target installs what it needs from pyproject.toml.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test test-bench test-ray test-agents test-tmux test-web check fmt lint types imports wheel-test bench screenshots clean

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,ray]'
	touch $(STAMP)

# The demo batch fails a child or two on purpose (exit 1) and "stop all and quit" exits 130:
# neither is a failure of the demo itself; bad input (2) still is.
# The commands it prints (attach, report) name `flightdeck`, which a new shell finds only in
# the venv: said once the demo ends.
demo: $(STAMP)
	@$(VENV)/bin/flightdeck run examples/demo.toml --config examples/flightdeck.toml; \
	code=$$?; command -v flightdeck >/dev/null || \
	echo "(here flightdeck is $(VENV)/bin/flightdeck: run the commands above as that, or . $(VENV)/bin/activate first)"; \
	[ $$code -eq 0 ] || [ $$code -eq 1 ] || [ $$code -eq 130 ] || [ $$code -eq 143 ] || exit $$code

# Most tests wait on threads, subprocesses and the sim's clock rather than the CPU: three
# workers take about half the time of one, even on two cores. TEST_WORKERS=0 runs them in one
# process. pytest runs without PYTHONDONTWRITEBYTECODE (set on CI machines): with it, every
# `flightdeck` process a test starts compiled the package again (50 ms each), and every xdist
# worker rewrote the asserts of every test module again instead of reading them from
# __pycache__ (5 s of CPU each).
TEST_WORKERS ?= 3
PYTEST := env -u PYTHONDONTWRITEBYTECODE $(PY) -m pytest
test: $(STAMP)
	$(PYTEST) -q -n $(TEST_WORKERS) --dist loadgroup -m "not bench and not ray"

# The Ray executor on a real two-node Ray cluster (tests/raycluster.py), one test at a time:
# they share the cluster. Part of `make check` and of CI; not of `make test`, where starting
# the cluster and its workers' processes was a seventh of the suite's CPU (docs/development.md).
test-ray: $(STAMP)
	$(PYTEST) -q -p no:xdist -m ray

# Every benchmark at tiny sizes, and the table `make bench` prints (tests/test_bench_smoke.py):
# that they still run and report, not how fast. Part of `make check` and of CI; not of `make
# test`, which tests flightdeck itself (about 80 s of CPU that says nothing about the product).
test-bench: $(STAMP)
	$(PYTEST) -q -n $(TEST_WORKERS) -m bench

# The real-terminal tests alone: `flightdeck attach` in tmux following a bursty transcript
# (part of `make test`), and the tmux benchmarks at tiny sizes (of `make test-bench`).
test-tmux: $(STAMP)
	$(PYTEST) -q tests/tui/test_tmux_attach.py tests/test_bench_smoke.py -k tmux

# The real agent CLIs, current from npm, installed into $(AGENTS_CACHE) and run as flightdeck
# children against the loopback server (tests/agents/). Opt-in: `make test` needs no npm.
AGENTS_CACHE ?= .cache-agents
AGENTS ?= @anthropic-ai/claude-code@latest @openai/codex@latest

test-agents: $(STAMP)
	@if ! command -v npm >/dev/null 2>&1; then \
		echo "test-agents: skipped: npm is not installed (it installs Claude Code and Codex)"; \
		exit 0; fi; \
	npm install --prefix $(AGENTS_CACHE) --no-audit --no-fund --silent $(AGENTS) && \
	FLIGHTDECK_AGENTS_BIN=$(AGENTS_CACHE)/node_modules/.bin \
		$(PYTEST) -q -p no:xdist tests/agents

# The browser suite, not part of `make test`: `flightdeck serve` in headless Chromium from
# Debian's packages, driven by Playwright (which never downloads a browser here). Chromium is
# installed when missing and this runs as root; otherwise every test skips, saying why.
CHROMIUM := /usr/bin/chromium
test-web: $(STAMP)
	$(PY) -m pip install --quiet -e '.[dev,browser]'
	@test -x $(CHROMIUM) || [ "$$(id -u)" != 0 ] || ! command -v apt-get >/dev/null || \
	  { apt-get update -qq && apt-get install -y -qq chromium >/dev/null; } || \
	  echo "test-web: could not install chromium (apt-get install chromium): the tests skip"
	$(PYTEST) -q -o addopts='--strict-markers -ra' tests/web

fmt: $(STAMP)
	$(VENV)/bin/ruff format engine tui tests scripts

lint: $(STAMP)
	$(VENV)/bin/ruff format --check engine tui tests scripts
	$(VENV)/bin/ruff check engine tui tests scripts

# mypy reads modules by path, not through the install's package-dir mapping: link the two
# top-level folders under their import names.
types: $(STAMP)
	mkdir -p .typecheck/flightdeck
	ln -sfn ../../engine .typecheck/flightdeck/engine
	ln -sfn ../../tui .typecheck/flightdeck/tui
	$(VENV)/bin/mypy

# The layering contracts in pyproject.toml ([tool.importlinter]).
imports: $(STAMP)
	$(VENV)/bin/lint-imports --no-cache --no-logo

# The built wheel, installed into a fresh venv and run outside the repository.
wheel-test: $(STAMP)
	PYTHON=$(PY) scripts/wheel_check.sh

check: lint types imports test test-ray test-bench

bench: $(STAMP)
	$(PY) tests/bench/run.py $(BENCH)

screenshots: $(STAMP)
	$(PY) scripts/screenshots.py

clean:
	rm -rf $(VENV) .typecheck .flightdeck .pytest_cache .mypy_cache .ruff_cache
