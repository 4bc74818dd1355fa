# The two commands of the README: `make demo` (the main job) and `make test`.
# Both create or refresh .venv at the repo root and install what they need.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The dev/test setup pins torch to the CPU build; the library itself accepts a range.
TORCH_PIN := torch==2.13.0
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck unit bench clean system-deps

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# Mooncake's CPU build links libibverbs.so.1; install it when it is missing.
system-deps:
	@if ! ldconfig -p 2>/dev/null | grep -q 'libibverbs.so.1 '; then \
		echo "installing libibverbs1 (needed by Mooncake)"; \
		SUDO=$$(command -v sudo >/dev/null && [ "$$(id -u)" != 0 ] && echo sudo); \
		$$SUDO apt-get install -y libibverbs1 >/dev/null || \
		{ $$SUDO apt-get update >/dev/null && $$SUDO apt-get install -y libibverbs1 >/dev/null; }; \
	fi

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/pip install --quiet "$(TORCH_PIN)"
	$(BIN)/pip install --quiet -e ".[dev,torch,mooncake-cpu]" "$(TORCH_PIN)"
	touch $(STAMP)

demo: system-deps $(STAMP)
	$(BIN)/python examples/demo.py

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python scripts/typecheck.py

unit: $(STAMP)
	$(BIN)/pytest -q

test: system-deps $(STAMP) lint unit

# One table of every performance figure against its goal (bench/table.py); the other
# scripts in bench/ take one figure apart.
bench: system-deps $(STAMP)
	$(BIN)/python bench/table.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
