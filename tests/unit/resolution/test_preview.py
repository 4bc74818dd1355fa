"""Step previews: notes shown by the dry run, refusals reported with locations."""

from __future__ import annotations

from pathlib import Path

import pytest

from initorch import Registry
from initorch.errors import ResolveError, StepDefinitionError
from initorch.loading.compose import compose
from initorch.plugin import PreviewContext, setting
from initorch.reporting.render import plan_text
from initorch.resolution.resolve import resolve
from initorch.resolution.saved import plan_json
from tests.support.synthetic import define

POOL_SIZE = setting("pool.size", int, default=1, description="a size a preview reads")
POOL_ENABLED = setting("pool.enabled", bool, default=True, description="a switch")


def registry_with(*definitions) -> Registry:
    registry = Registry()
    for definition in definitions:
        registry.steps.add(definition)
    return registry


def plan_for(registry: Registry, tmp_path: Path, body: str, environ: dict[str, str]):
    profile = tmp_path / "p.yaml"
    profile.write_text("device:\n  type: cpu\n" + body, encoding="utf-8")
    return resolve(compose(registry.profiles, [str(profile)]), registry.steps, environ=environ)


def previewed(name: str, preview) -> object:
    definition = define(name, settings=(POOL_SIZE,))
    definition.preview(preview)
    return definition


def test_notes_are_shown_and_kept_out_of_the_fingerprint(tmp_path: Path) -> None:
    def notes(ctx: PreviewContext) -> list[str]:
        return [f"ranks here: {ctx.environ.get('LOCAL_WORLD_SIZE', '1')}",
                f"size {ctx.setting('pool.size')} on {ctx.device.type}"]

    registry = registry_with(previewed("a", notes))
    body = "steps:\n  a: {}\nconfig:\n  pool:\n    size: 4\n"
    one = plan_for(registry, tmp_path, body, {})
    two = plan_for(registry, tmp_path, body, {"LOCAL_WORLD_SIZE": "2"})
    assert one.step("a").notes == ("ranks here: 1", "size 4 on cpu")
    assert two.step("a").notes[0] == "ranks here: 2"
    assert one.fingerprint == two.fingerprint
    assert "  | ranks here: 1\n" in plan_text(one)
    assert plan_json(one)["steps"][0]["preview"] == ["ranks here: 1", "size 4 on cpu"]


def test_every_refusal_is_reported_at_its_setting(tmp_path: Path) -> None:
    def refuse(ctx: PreviewContext) -> list[str]:
        ctx.reject(f"{ctx.setting('pool.size')} is too big", setting="pool.size",
                   hint="use less")

    registry = registry_with(previewed("a", refuse), previewed("b", refuse))
    with pytest.raises(ResolveError) as info:
        plan_for(registry, tmp_path, "steps:\n  a: {}\n  b: {}\nconfig:\n  pool:\n    size: 9\n",
                 {})
    problems = info.value.problems
    assert [p.message for p in problems] == ["step 'a': 9 is too big", "step 'b': 9 is too big"]
    assert all(str(p.location).endswith("p.yaml:8:11") and p.hint == "use less"
               for p in problems)


def test_a_preview_reading_an_undeclared_setting_is_refused(tmp_path: Path) -> None:
    registry = registry_with(previewed("a", lambda ctx: [ctx.setting("no.such")]))
    with pytest.raises(ResolveError, match=r"reads setting 'no\.such'"):
        plan_for(registry, tmp_path, "steps:\n  a: {}\n", {})


def test_a_broken_preview_is_a_bug_not_bad_input(tmp_path: Path) -> None:
    def broken(ctx: PreviewContext) -> list[str]:
        raise ZeroDivisionError("oops")

    registry = registry_with(previewed("a", broken))
    with pytest.raises(ZeroDivisionError):
        plan_for(registry, tmp_path, "steps:\n  a: {}\n", {})


def test_skipped_steps_are_not_previewed(tmp_path: Path) -> None:
    calls: list[str] = []
    definition = define("a", when="pool.enabled", settings=(POOL_ENABLED,))
    definition.preview(lambda ctx: calls.append(ctx.step) or [])
    plan = plan_for(registry_with(definition), tmp_path,
                    "steps:\n  a: {}\nconfig:\n  pool:\n    enabled: false\n", {})
    assert plan.order == () and calls == []


def test_preview_must_be_callable() -> None:
    definition = define("a")
    definition.preview_fn = "not callable"  # type: ignore[assignment]
    with pytest.raises(StepDefinitionError, match="preview is not callable"):
        Registry().steps.add(definition)
