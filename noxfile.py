"""The core tests on every supported Python: ``nox -s core`` (``make pythons``).

The core (``orchestrator/``: profiles, settings, resolution, plans, reports) needs no
torch and no vendor stack, so its tests run in a venv of initorch and the test tools
only, on Python 3.10 to 3.13.  The whole suite, with torch, Mooncake and SGLang, runs
on the main venv's Python (``make test``).
"""

from __future__ import annotations

import nox

nox.options.error_on_missing_interpreters = True  # a missing Python is a failure, not a skip

PYTHONS = ("3.10", "3.11", "3.12", "3.13")

CORE_TESTS = (
    # Every test of the model and resolution layers: none needs torch.
    "tests/unit/model",
    "tests/unit/resolution",
    "tests/unit/loading/test_compose.py",
    "tests/unit/loading/test_document.py",
    "tests/unit/loading/test_document_edges_env.py",
    "tests/unit/loading/test_schema.py",
    "tests/unit/loading/test_settle.py",
    "tests/unit/loading/test_yamlsource.py",
    "tests/unit/reporting/test_logs.py",
    "tests/unit/reporting/test_report.py",
    "tests/unit/reporting/test_trace_merge.py",
    "tests/unit/plugins/test_plugins.py",
    # Plugin discovery reads sys.path as each Python's importlib.metadata does.
    "tests/unit/plugins/test_entry_points.py",
    "tests/unit/base/test_gc_pause.py",
    # A record compiles its own __init__ beside each Python's dataclasses.
    "tests/unit/base/test_records.py",
    "tests/unit/api/test_imports.py",
    "tests/unit/base/test_location.py",
    "tests/unit/cli/test_validate.py",
)


@nox.session(python=PYTHONS, venv_backend="venv")
def core(session: nox.Session) -> None:
    """The core tests, without torch: initorch and its three dependencies only."""
    session.install("-e", ".", "pytest>=8", "hypothesis>=6.100", "jsonschema>=4.20")
    session.run("python", "-m", "pytest", "-q", "-p", "no:cacheprovider", *CORE_TESTS,
                *session.posargs)
