# The two commands a new user runs: `make train` (the main job) and `make test` (the whole suite).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: setup train test test-fast bench lint docs docs-preview

$(BIN)/torchrl-mask: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# CPU torch first: with no torch present, installing torchrl pulls a multi-GB CUDA build.
	$(BIN)/pip install -q "torch==2.13.0"
	$(BIN)/pip install -q -e ".[dev,tutorials,docs,games,ray]"
	touch $@

setup: $(BIN)/torchrl-mask

train: setup
	$(BIN)/torchrl-mask train

# The suite runs on up to 4 of the machine's cores (pytest-xdist); each test keeps to one torch thread. Worksteal
# keeps both workers busy to the end, since the longest tests (the docs build, the self-play runs) take minutes.
test: setup
	$(BIN)/ruff check torchrl_mask tests benchmarks
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
