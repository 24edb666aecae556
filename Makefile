# The two commands a new user runs: `make train` (the main job) and `make test` (the whole suite).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: setup browser train test test-fast bench lint docs docs-preview

$(BIN)/torchrl-mask: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# CPU torch first: with no torch present, installing torchrl pulls a multi-GB CUDA build.
	$(BIN)/pip install -q "torch==2.13.0"
	$(BIN)/pip install -q -e ".[dev,tutorials,docs,games,ray,tune,solver,scheduling]"
	touch $@

setup: $(BIN)/torchrl-mask

# tests/test_tune.py opens optuna-dashboard's page in a headless Chromium: installed here when missing, with apt-get
# as root (Debian, Ubuntu: CI's fresh machine); anywhere else install chromium yourself, or that test fails saying so.
browser:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
	  { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } || \
	  echo "make: chromium is not installed (needs root and apt-get); tests/test_tune.py's dashboard test will fail"

train: setup
	$(BIN)/torchrl-mask train

# The suite runs on up to 4 of the machine's cores (pytest-xdist); each test keeps to one torch thread. Worksteal
# keeps both workers busy to the end, since the longest tests (the docs build, the self-play runs) take minutes.
test: setup browser
	$(BIN)/ruff check torchrl_mask tests benchmarks tutorials
	$(BIN)/ruff format --check torchrl_mask tests benchmarks tutorials
	$(BIN)/mypy
	$(BIN)/python -m pytest -n auto --maxprocesses 4 --dist worksteal

# The tests without the slow ones (learning runs, tests that start processes, the docs build that executes the
# tutorials).
test-fast: setup
	$(BIN)/python -m pytest -m "not slow" -n auto --maxprocesses 4

bench: setup
	$(BIN)/torchrl-mask bench

# The site in site/, tutorials executed with the current code; docs-preview serves it without executing them.
docs: setup
	$(BIN)/mkdocs build --strict

docs-preview: setup
	TORCHRL_MASK_DOCS_EXECUTE=false $(BIN)/mkdocs serve
