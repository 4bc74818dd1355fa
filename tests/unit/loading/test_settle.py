"""initorch.loading.settle: defaults, then profiles, then --set, each checked and located."""

from __future__ import annotations

import pytest

from initorch import load_plan
from initorch.api import load_settings
from initorch.errors import ProfileError
from initorch.loading.compose import compose
from initorch.loading.settle import settle
from initorch.location import COMMAND_LINE
from initorch.resolution.saved import plan_json
from tests.support.profiles import assert_problem, write


def test_values_come_from_defaults_profiles_and_the_command_line(builtin_registry):
    settled = load_settings(["npu"], settings={"hicache.host_pool_mb": 128},
                            registry=builtin_registry)
    pool, layout, timeout = (settled.values[k] for k in
                             ("hicache.host_pool_mb", "hicache.layout", "distributed.timeout_s"))
    assert (pool.value, pool.origin) == (128, "<command line>")
    assert layout.value == "page_first_direct"
    assert layout.origin.endswith("npu.yaml:34:13")
    assert timeout.value == 120.0 and type(timeout.value) is float
    assert timeout.is_default
    assert timeout.origin.startswith("default (declared by step rendezvous at ")
    assert timeout.origin.endswith(")") and "rendezvous.py:" in timeout.origin


def test_every_declared_setting_is_in_the_plan(builtin_registry):
    plan = load_plan(["cpu"], registry=builtin_registry)
    declared = {spec.key for spec in builtin_registry.settings}
    # cpu gives no visible-devices variable: the nullable setting is null, still present.
    assert set(plan.settings) == declared
    assert plan.settings["device.visible_devices_env"].value is None
    assert plan_json(plan)["setting_origins"]["device.type"].endswith("cpu.yaml:4:9")


def test_an_overlay_settles_without_a_device(builtin_registry):
    settled = load_settings(["mooncake-ep"], registry=builtin_registry)
    assert settled.values["mooncake.elastic_ep"].value is True
    assert "device.backend_package" in settled.missing  # required, given by no profile here
    assert settled.for_conditions()["device.backend_package"] is None


@pytest.mark.parametrize(("text", "fragments", "where"), [
    ("config:\n  hicache:\n    host_pol_mb: 8\n",
     ("unknown setting 'hicache.host_pol_mb'", "did you mean 'hicache.host_pool_mb'?"),
     "p.yaml:3:5"),
    ("device:\n  colective_backend: gloo\n",
     ("unknown setting 'device.colective_backend'",
      "did you mean 'device.collective_backend'?"), "p.yaml:2:3"),
    ("config:\n  zzz_qqq: 1\n", ("unknown setting 'zzz_qqq'", "see 'initorch settings'"),
     "p.yaml:2:3"),
    ("config:\n  hicache: 5\n",
     ("'hicache' is a section of settings (hicache.enabled, hicache.host_memory_reserve_mb, ",
      "give the settings below it one by one"), "p.yaml:2:3"),
    ("config:\n  hicache:\n    layout:\n      x: 1\n",
     ("unknown setting 'hicache.layout.x': 'hicache.layout' is a setting, not a section",),
     "p.yaml:4:7"),
    ("config:\n  hicache:\n    layout: 3\n",
     ("hicache.layout must be text, got the number 3", "quote it to pass text"), "p.yaml:3:13"),
    ("device:\n  host_allocator: pinned_memory\n",
     ("device.host_allocator must be one of cuda_host_register, pin_memory, pin_memory_xpu, "
      "plain, got "
      "'pinned_memory'", "did you mean 'pin_memory'?"), "p.yaml:2:19"),
    ("config:\n  started: 2024-01-01\n", ("unknown setting 'started'",), "p.yaml:2:3"),
    ("config:\n  mooncake:\n    hostname: 2024-01-01\n",
     ("mooncake.hostname must be text, got a date", "quote it to pass text"), "p.yaml:3:15"),
])
def test_profile_values_are_checked_where_they_are(tmp_path, builtin_registry, text, fragments,
                                                   where):
    path = write(tmp_path, "p.yaml", f"extends: cpu\n{text}")
    with pytest.raises(ProfileError) as caught:
        load_plan([str(path)], registry=builtin_registry)
    # extends: cpu is line 1, so every position moves one line down
    line, column = where.split(":")[1:]
    assert_problem(caught.value, *fragments, at=f"p.yaml:{int(line) + 1}:{column}")


@pytest.mark.parametrize(("assignment", "fragments"), [
    ("hicache.host_pol_mb=8", ("--set hicache.host_pol_mb: no such setting",
                               "did you mean 'hicache.host_pool_mb'?")),
    ("hicache.host_p\u043eol_mb=8", ("--set hicache.host_p\u043eol_mb: no such setting: "
                                    "setting key", "U+043E CYRILLIC SMALL LETTER O")),
    ("hicache=1", ("'hicache' is a section of settings",)),
    ("device.visible_devices_env=A B", ("device.visible_devices_env must match",)),
])
def test_set_keys_and_values_are_checked(builtin_registry, assignment, fragments):
    with pytest.raises(ProfileError) as caught:
        load_plan(["cpu"], settings=[assignment], registry=builtin_registry)
    problem = assert_problem(caught.value, *fragments)
    assert problem.location == COMMAND_LINE


def test_settings_from_python_must_have_text_keys(builtin_registry):
    with pytest.raises(ProfileError, match="setting keys are text, got int 3"):
        load_plan(["cpu"], settings={3: 1}, registry=builtin_registry)  # type: ignore[dict-item]


def test_set_may_give_a_declared_setting_no_profile_mentions(builtin_registry):
    plan = load_plan(["cpu"], settings=["device.visible_devices_env=CUDA_VISIBLE_DEVICES"],
                     registry=builtin_registry)
    assert plan.settings["device.visible_devices_env"].value == "CUDA_VISIBLE_DEVICES"


def test_every_settings_problem_is_reported_at_once(tmp_path, builtin_registry):
    path = write(tmp_path, "p.yaml", """
        extends: cpu
        device:
          host_allocator: pinned_memory
        config:
          hicache:
            host_pol_mb: 8
            layout: 3
        """)
    composed = compose(builtin_registry.profiles, [str(path)], [("mooncake.enabled", "no")])
    problems = [str(p) for p in settle(composed, builtin_registry.settings).problems]
    assert len(problems) == 4, problems
