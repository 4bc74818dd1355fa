"""Edge reasons and the ``env:`` section: parsing, layering, plan, rendering, runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from initorch.errors import ProfileError
from initorch.execution.environment import apply_environment
from initorch.loading.document import EnvEntry, parse_profile
from initorch.location import SourceLocation
from initorch.reporting.graph_formats import graph_dot, graph_json, graph_mermaid
from initorch.reporting.render import plan_text
from initorch.resolution.saved import plan_json
from tests.support.profiles import error_of, find_problem, plan_of, registry_of, write
from tests.support.synthetic import FLAG, define

A, B, C = define("a"), define("b"), define("c")
REASON = 'SGLang 0.5.23 bootstrap.py: engine before "group" | always'
ORDERED = f"""
device: {{type: cpu}}
steps:
  a: {{}}
  b:
    after:
      - {{step: a, reason: '{REASON}'}}
  c:
    requires: [b]
"""


# --- edge reasons ---------------------------------------------------------------------

def test_edge_items_carry_reasons_into_the_plan(tmp_path: Path) -> None:
    plan = plan_of(tmp_path, ORDERED, A, B, C)
    (edge,) = plan.explain("a", "b")
    assert edge.reason == REASON
    assert edge.describe().endswith(f": {REASON}")
    assert str(edge.declared_at) == f"{tmp_path / 'p.yaml'}:6:16"
    chain = plan.explain("a", "c")
    assert [e.reason for e in chain] == [REASON, None]


def test_reasons_are_shown_by_graph_formats_and_plan_json(tmp_path: Path) -> None:
    plan = plan_of(tmp_path, ORDERED, A, B, C)
    dot = graph_dot(plan)
    assert '"a" -> "b" [label="after", tooltip="SGLang 0.5.23 bootstrap.py: engine before ' \
        '\\"group\\"' in dot
    assert '"b" -> "c" [label="requires", style=' in dot  # no reason, no tooltip
    mermaid = graph_mermaid(plan)
    assert "a -->|\"after: SGLang 0.5.23 bootstrap.py: engine before #quot;group#quot; " \
           "#124; always\"| b" in mermaid
    assert "b -->|requires| c" in mermaid
    edges = {(e["from"], e["to"]): e for e in json.loads(graph_json(plan))["edges"]}
    assert edges[("a", "b")]["reason"] == REASON
    assert edges[("b", "c")]["reason"] is None
    data = plan_json(plan)
    assert {(e["from"], e["to"], e["reason"]) for e in data["edges"]} == {
        ("a", "b", REASON), ("b", "c", None)}
    json.dumps(data)


def test_a_reason_does_not_change_the_fingerprint(tmp_path: Path) -> None:
    plain = plan_of(tmp_path, ORDERED.replace(f"- {{step: a, reason: '{REASON}'}}", "- a"),
                    A, B, C)
    assert plain.explain("a", "b")[0].reason is None
    assert plain.fingerprint == plan_of(tmp_path, ORDERED, A, B, C).fingerprint


def test_restating_a_declared_edge_with_a_reason_attaches_it(tmp_path: Path) -> None:
    needs_a = define("needs_a", requires=["a"])
    text = """
    device: {type: cpu}
    steps:
      needs_a:
        requires: [{step: a, reason: because upstream says so}]
    """
    plan = plan_of(tmp_path, text, A, needs_a)
    (edge,) = plan.explain("a", "needs_a")
    assert (edge.reason, edge.declared_by) == ("because upstream says so", "profile p")


def test_a_requirement_on_a_skipped_step_names_the_reason(tmp_path: Path) -> None:
    skipped = define("gate", when="flag", settings=(FLAG,))
    needs = define("needs")
    text = """
    device: {type: cpu}
    config: {flag: false}
    steps:
      needs:
        requires: [{step: gate, reason: no such backend on this device}]
    """
    error = error_of(tmp_path, text, skipped, needs)
    problem = find_problem(error, "requires 'gate' (no such backend on this device), "
                                  "which is skipped")
    assert problem.location is not None and problem.location.line == 5


@pytest.mark.parametrize(("item", "fragment"), [
    ("{reason: x}", "an edge item needs 'step: NAME'"),
    ("{step: a, reason: ''}", "the reason of the edge to 'a' must be a non-empty string"),
    ("{step: a, reason: 3}", "the reason of the edge to 'a' must be a non-empty string"),
    ("{step: a, why: x}", "unknown key 'why'"),
    ("[[a]]", "'after' must be a step name or a list of step names"),
])
def test_bad_edge_items_are_reported_where_they_are(tmp_path: Path, item: str,
                                                    fragment: str) -> None:
    text = f"device: {{type: cpu}}\nsteps:\n  b:\n    after: {item}\n"
    error = error_of(tmp_path, text, A, B, expected=ProfileError)
    problem = find_problem(error, fragment)
    assert problem.location is not None and problem.location.line == 4


# --- the env section: parsing and layering --------------------------------------------

def test_env_values_are_text_and_whole_numbers(tmp_path: Path) -> None:
    doc = parse_profile("env:\n  MC_FORCE_TCP: 1\n  HCCL_SOCKET_IFNAME: eth0\n"
                        "  GONE: null\n", "p.yaml", "p")
    assert [(e.name, e.value) for e in doc.env] == [
        ("MC_FORCE_TCP", "1"), ("HCCL_SOCKET_IFNAME", "eth0"), ("GONE", None)]
    assert str(doc.env[0].location) == "p.yaml:2:17"


@pytest.mark.parametrize(("text", "fragment", "line"), [
    ("env: [A]\n", "'env' must map variable names to values", 1),
    ("env:\n  1BAD: x\n", "'1BAD' is not a valid environment variable name", 2),
    ("env:\n  A-B: x\n", "'A-B' is not a valid environment variable name", 2),
    ("env:\n  FLAG: true\n", "env.FLAG must be text, a whole number or null", 2),
    ("env:\n  R: 1.5\n", "env.R must be text, a whole number or null", 2),
    ("env:\n  L: [a]\n", "env.L must be text, a whole number or null", 2),
])
def test_bad_env_entries_are_reported(text: str, fragment: str, line: int) -> None:
    with pytest.raises(ProfileError) as caught:
        parse_profile(text, "p.yaml", "p")
    problem = find_problem(caught.value, fragment)
    assert problem.location is not None and problem.location.line == line


# What these load, per runtime: PERLLIB/PERL5LIB (perlrun: @INC), RUBYLIB (ruby: $LOAD_PATH),
# NODE_PATH (node: module folders), _JAVA_OPTIONS/JDK_JAVA_OPTIONS/JAVA_TOOL_OPTIONS (a
# -javaagent jar), PYTHONPYCACHEPREFIX (where Python reads .pyc files from).
@pytest.mark.parametrize("name", [
    "PERLLIB", "PERL5LIB", "PERL5DB", "RUBYLIB", "RUBYOPT", "NODE_PATH", "NODE_OPTIONS",
    "NODE_REPL_EXTERNAL_MODULE", "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS", "JAVA_TOOL_OPTIONS",
    "PYTHONPYCACHEPREFIX", "PYTHONSAFEPATH", "PYTHONEXECUTABLE", "pythonpath", "GCONV_PATH"])
def test_variables_that_load_code_into_other_runtimes_are_refused_by_family(name: str) -> None:
    with pytest.raises(ProfileError) as caught:
        parse_profile(f"env:\n  MC_FORCE_TCP: 1\n  {name}: /tmp/planted\n", "p.yaml", "p")
    problem = find_problem(caught.value, f"env.{name} would make programs load code")
    assert str(problem.location) == "p.yaml:3:3"
    assert len(caught.value.problems) == 1


@pytest.mark.parametrize("name", ["PYTHONUNBUFFERED", "PYTHONFAULTHANDLER", "PYTHONHASHSEED",
                                  "PYTHONIOENCODING", "PYTHONUTF8", "PYTHONDONTWRITEBYTECODE",
                                  "NCCL_DEBUG", "OMP_NUM_THREADS", "JAVA_HOME"])
def test_the_python_variables_that_name_no_code_are_still_set(name: str) -> None:
    doc = parse_profile(f"env:\n  {name}: 1\n", "p.yaml", "p")
    assert [(e.name, e.value) for e in doc.env] == [(name, "1")]


def test_later_profiles_override_and_null_drops(tmp_path: Path) -> None:
    write(tmp_path, "base.yaml", "device: {type: cpu}\nenv:\n  A: one\n  B: two\n")
    write(tmp_path, "top.yaml", "extends: base.yaml\nenv:\n  A: uno\n  B: null\n  C: 3\n")
    plan = plan_of(tmp_path, "extends: top.yaml\n", A)
    assert {name: e.value for name, e in plan.env.items()} == {"A": "uno", "C": "3"}
    assert plan.env["A"].source == "top"
    assert plan_json(plan)["env"] == {"A": "uno", "C": "3"}
    text = plan_text(plan)
    assert "environment (set before the first step unless already set):" in text
    assert "  A=uno  (profile top, " in text


def test_env_is_covered_by_the_fingerprint(tmp_path: Path) -> None:
    first = plan_of(tmp_path, "device: {type: cpu}\nenv: {A: one}\nsteps: {a: {}}\n", A)
    second = plan_of(tmp_path, "device: {type: cpu}\nenv: {A: two}\nsteps: {a: {}}\n", A)
    none = plan_of(tmp_path, "device: {type: cpu}\nsteps: {a: {}}\n", A)
    assert len({first.fingerprint, second.fingerprint, none.fingerprint}) == 3


# --- the env section at run time ------------------------------------------------------

def entry(name: str, value: str) -> EnvEntry:
    return EnvEntry(name, value, SourceLocation("p.yaml", 1, 1), "p")


def test_the_process_environment_wins_and_only_what_was_set_is_restored() -> None:
    environ = {"KEPT": "from-process", "EMPTY": ""}
    applied = apply_environment({"KEPT": entry("KEPT", "from-profile"),
                                 "EMPTY": entry("EMPTY", "x"),
                                 "NEW": entry("NEW", "1")}, environ)
    assert environ == {"KEPT": "from-process", "EMPTY": "", "NEW": "1"}
    assert [(o.name, o.source) for o in applied.outcomes] == [
        ("KEPT", "process"), ("EMPTY", "process"), ("NEW", "profile")]
    assert applied.restore() == ["NEW"]
    assert environ == {"KEPT": "from-process", "EMPTY": ""}
    assert applied.restore() == []


def test_a_value_changed_during_the_run_is_not_clobbered_on_restore() -> None:
    environ: dict[str, str] = {}
    applied = apply_environment({"NEW": entry("NEW", "1")}, environ)
    environ["NEW"] = "changed by a step"
    assert applied.restore() == []
    assert environ == {"NEW": "changed by a step"}


@given(st.dictionaries(st.sampled_from(["A", "B", "C", "D"]), st.text(max_size=5)),
       st.dictionaries(st.sampled_from(["A", "B", "C", "D"]), st.text(max_size=5)))
def test_apply_then_restore_leaves_the_environment_as_it_was(
        before: dict[str, str], profile: dict[str, str]) -> None:
    environ = dict(before)
    applied = apply_environment({k: entry(k, v) for k, v in profile.items()}, environ)
    assert all(environ[k] == before.get(k, v) for k, v in profile.items())
    applied.restore()
    assert environ == before


def test_a_run_sets_variables_for_its_steps_and_unsets_them_after(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from initorch.execution.run import Run

    seen: dict[str, str | None] = {}

    def look(ctx: object) -> None:
        seen.update(NEW=os.environ.get("INITORCH_TEST_NEW"),
                    KEPT=os.environ.get("INITORCH_TEST_KEPT"))

    monkeypatch.delenv("INITORCH_TEST_NEW", raising=False)
    monkeypatch.setenv("INITORCH_TEST_KEPT", "mine")
    registry = registry_of(define("look", look))
    plan = plan_of(tmp_path, "device: {type: cpu}\nenv:\n  INITORCH_TEST_NEW: 1\n"
                   "  INITORCH_TEST_KEPT: theirs\nsteps: {look: {}}\n", define("look", look))
    with Run(plan, diagnoses=registry.diagnoses) as run:
        assert os.environ["INITORCH_TEST_NEW"] == "1"
    assert seen == {"NEW": "1", "KEPT": "mine"}
    assert "INITORCH_TEST_NEW" not in os.environ
    assert os.environ["INITORCH_TEST_KEPT"] == "mine"
    assert run.report.to_dict()["environment"] == [
        {"name": "INITORCH_TEST_NEW", "value": "1", "source": "profile", "profile_value": "1"},
        {"name": "INITORCH_TEST_KEPT", "value": "mine", "source": "process",
         "profile_value": "theirs"}]
