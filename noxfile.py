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
    "tests/test_compose.py", "tests/test_conditions.py", "tests/test_devices.py",
    "tests/test_dry_run_isolation.py", "tests/test_edge_reasons_and_env.py",
    "tests/test_fingerprint.py", "tests/test_graph.py", "tests/test_location.py",
    "tests/test_logs.py", "tests/test_names.py", "tests/test_plan.py",
    "tests/test_plan_time_refusals.py", "tests/test_plangraph.py", "tests/test_plugins.py",
    "tests/test_preview.py", "tests/test_profile.py", "tests/test_reads.py",
    "tests/test_reasons.py", "tests/test_registry.py", "tests/test_report.py",
    "tests/test_resolve.py", "tests/test_saved.py", "tests/test_schema.py",
    "tests/test_settings.py", "tests/test_settle.py", "tests/test_trace_merge.py",
    "tests/test_yamlsource.py",
)


@nox.session(python=PYTHONS, venv_backend="venv")
def core(session: nox.Session) -> None:
    """The core tests, without torch: initorch and its three dependencies only."""
    session.install("-e", ".", "pytest>=8", "hypothesis>=6.100", "jsonschema>=4.20")
    session.run("python", "-m", "pytest", "-q", "-p", "no:cacheprovider", *CORE_TESTS,
                *session.posargs)
