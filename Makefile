# The commands of the README: `make demo` (the main job), `make demo-sglang` (the real
# SGLang server started through initorch) and `make test` (everything, SGLang included).
# They create or refresh .venv (and .venv-sglang) at the repo root and install what they need.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The dev/test setup pins torch to the CPU build; the library itself accepts a range.
TORCH_PIN := torch==2.13.0
STAMP := $(VENV)/.installed
# SGLang lives in a venv of its own (11 GB): it pins torch 2.14.1, which pip takes from this
# machine's wheel folder; the CPU Mooncake build goes beside it, never the CUDA one.
SGLANG_VENV := .venv-sglang
SGLANG_STAMP := $(SGLANG_VENV)/.installed
SGLANG_PIN := sglang==0.5.23
MOONCAKE_CPU_PIN := mooncake-transfer-engine-non-cuda==0.3.13.post1

.PHONY: demo demo-sglang test lint typecheck unit e2e pythons docs bench clean system-deps sglang-venv

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

$(SGLANG_STAMP): pyproject.toml integrations/sglang/pyproject.toml
	$(PYTHON) -m venv $(SGLANG_VENV)
	$(SGLANG_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(SGLANG_VENV)/bin/pip install --quiet "$(SGLANG_PIN)" "$(MOONCAKE_CPU_PIN)"
	$(SGLANG_VENV)/bin/pip install --quiet -e . -e integrations/sglang
	touch $(SGLANG_STAMP)

sglang-venv: system-deps $(SGLANG_STAMP)

demo: system-deps $(STAMP)
	$(BIN)/python examples/demo.py

demo-sglang: system-deps $(STAMP) $(SGLANG_STAMP)
	$(BIN)/python examples/sglang_demo.py

# Style, types, and the layer contract ([tool.importlinter] in pyproject.toml; the
# built-in steps' own contract is tests/test_public_names.py, import-linter cannot see them).
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python scripts/typecheck.py
	$(BIN)/lint-imports

# The fast tier (no real start-up, no SGLang), then the real end-to-end tier.
unit: $(STAMP)
	$(BIN)/pytest -q -m "not e2e and not sglang"

e2e: system-deps $(STAMP) $(SGLANG_STAMP)
	$(BIN)/pytest -q -m "e2e or sglang"

# The core tests (no torch) on Python 3.10 to 3.13 (noxfile.py), from pyenv's interpreters.
PYTHONS := 3.10 3.11 3.12 3.13
pythons: $(STAMP)
	@command -v pyenv >/dev/null || { echo "make pythons needs pyenv with Python $(PYTHONS)"; exit 1; }
	PATH="$$(pyenv prefix $(PYTHONS) | sed 's#:#/bin:#g')/bin:$$PATH" $(BIN)/nox -s core

# The documentation site (mkdocs.yml, docs/) into site/; --strict: a warning or a broken
# link fails the build.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

test: system-deps $(STAMP) $(SGLANG_STAMP) lint docs pythons unit e2e

# One table of every performance figure against its goal (bench/table.py); the other
# scripts in bench/ take one figure apart.
bench: system-deps $(STAMP)
	$(BIN)/python bench/table.py

clean:
	rm -rf $(VENV) $(SGLANG_VENV) build site *.egg-info .pytest_cache .mypy_cache .ruff_cache .nox
