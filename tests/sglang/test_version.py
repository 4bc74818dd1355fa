"""The plugin accepts the SGLang releases the audit proves, and only those.

Real trees throughout: the installed SGLang 0.5.23 (proven), the published 0.5.10.post1
wheel (no plugin system: not proven) and a copy of 0.5.23 with its engine moved after the
process group (drift: not proven).  Which tree counts as "installed" is re-pointed in
the child process, the one simulation here.
"""

from __future__ import annotations

import json
import re
import zipfile
from pathlib import Path

import pytest

from initorch_sglang.version import prove
from tests.sglang.server import run_in_sglang
from tests.support.wheels import wheel

ENGINE_CALL = "    maybe_init_shared_mooncake_transfer_engine(gpu_id=get_device().gpu_id)\n"
BOOTSTRAP = "srt/distributed/bootstrap.py"


def installed_as(tree: Path | None, version: str) -> str:
    """Child-process code that makes ``tree`` the installed SGLang ``version``."""
    if tree is None:
        return ""
    return ("import initorch_sglang.version as v\n"
            f"v.installed_tree_path = lambda: __import__('pathlib').Path({str(tree)!r})\n"
            f"v.installed_sglang = lambda: {version!r}\n")


def load_plugin(tree: Path | None, version: str, cache: Path,
                **environ: str) -> tuple[int, str, str]:
    code = (installed_as(tree, version) + "from initorch_sglang.plugin import load\n"
            "load()\nprint('went on')\n")
    result = run_in_sglang(code, XDG_CACHE_HOME=str(cache), **environ)
    return result.returncode, result.stdout, result.stderr


@pytest.fixture(scope="module")
def old_wheel() -> Path:
    return wheel("sglang", "0.5.10.post1").path


@pytest.fixture(scope="module")
def drifted(sglang_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """0.5.23 with the shared engine after ``_init_parallel_groups`` (as 0.5.16 had it)."""
    root = tmp_path_factory.mktemp("drifted")
    with zipfile.ZipFile(sglang_wheel) as source:
        source.extractall(root, [name for name in source.namelist()
                                 if name.startswith("sglang/") and name.endswith(".py")])
    path = root / "sglang" / BOOTSTRAP
    text = path.read_text().replace(ENGINE_CALL, "")
    groups = re.search(r"\n    _init_parallel_groups\(\n(?:        .*\n)+    \)\n", text)
    assert groups is not None
    path.write_text(text[:groups.end()] + ENGINE_CALL + text[groups.end():])
    return root / "sglang"


def test_the_installed_0_5_23_is_proven_once_then_read_from_the_cache(tmp_path: Path) -> None:
    """Twice in one process (others edit this checkout, and the key follows its code):
    the second verdict is the cached file's, so an edited file shows through."""
    code = ("import json, pathlib, sys\n"
            "from initorch_sglang.version import sglang_verdict\n"
            "first = sglang_verdict()\n"
            "(cached,) = (pathlib.Path(sys.argv[-1]) / 'initorch').glob('sglang-0.5.23-*.json')\n"
            "data = json.loads(cached.read_text()) | {'reason': 'edited cache'}\n"
            "cached.write_text(json.dumps(data))\n"
            "print(json.dumps([repr(first), repr(sglang_verdict())]))\n").replace(
                "sys.argv[-1]", repr(str(tmp_path)))
    result = run_in_sglang(code, XDG_CACHE_HOME=str(tmp_path))
    assert result.returncode == 0, result.stderr
    first, second = json.loads(result.stdout.strip().splitlines()[-1])
    assert first == ("SGLangVerdict(version='0.5.23', accepted=True, drive=True, "
                     "layout='bootstrap', reason='layout bootstrap: hook targets resolve, "
                     "no drift')")
    assert second == first.replace("layout bootstrap: hook targets resolve, no drift",
                                   "edited cache")


def test_a_release_without_the_plugin_system_is_not_proven(old_wheel: Path) -> None:
    verdict = prove(old_wheel, "0.5.10.post1")
    assert (verdict.accepted, verdict.drive, verdict.layout) == (False, False, "model_runner")
    assert verdict.reason == "no SGLang plugin system (srt/plugins/hook_registry.py is missing)"


def test_a_drifted_release_is_not_proven(drifted: Path) -> None:
    verdict = prove(drifted, "0.5.23+moved")
    assert not verdict.accepted
    assert verdict.reason.startswith("drift against the sglang profile (1: "
                                     "init_shared_mooncake_transfer_engine before "
                                     "init_torch_distributed;")


def test_verify_mode_switches_off_with_one_line_and_sglang_starts_stock(
        old_wheel: Path, tmp_path: Path) -> None:
    code, out, err = load_plugin(old_wheel, "0.5.10.post1", tmp_path, INITORCH_SGLANG="verify")
    assert code == 0 and out.strip() == "went on"
    assert err.strip() == (
        "initorch-sglang: SGLang 0.5.10.post1 is not proven for initorch (no SGLang plugin "
        "system (srt/plugins/hook_registry.py is missing)); proven: the releases initorch "
        "sglang audit supports with no drift (run end to end: 0.5.23); verify mode is off "
        "and SGLang starts without initorch (INITORCH_SGLANG_UNVERIFIED=allow tries anyway)")


def test_drive_mode_refuses_an_unproven_release_in_one_line(drifted: Path,
                                                            tmp_path: Path) -> None:
    code, out, err = load_plugin(drifted, "0.5.23+moved", tmp_path, INITORCH_SGLANG="drive")
    assert code == 1 and "went on" not in out
    (line,) = err.strip().splitlines()
    assert line.startswith("initorch-sglang: SGLang 0.5.23+moved is not proven for initorch "
                           "(drift against the sglang profile")
    assert line.endswith("; drive mode refuses the launch")


def test_unverified_allow_tries_anyway(drifted: Path, tmp_path: Path) -> None:
    code, out, err = load_plugin(drifted, "0.5.23+moved", tmp_path, INITORCH_SGLANG="verify",
                                 INITORCH_SGLANG_UNVERIFIED="allow")
    assert code == 0 and out.strip() == "went on" and err.strip() == ""


def test_the_call_map_is_the_installed_releases_layout(tmp_path: Path) -> None:
    """With 0.5.20 installed, verify mode hooks runner_bootstrap's targets, and drive mode
    (which replaces init_parallel_runtime, 0.5.21 on) refuses."""
    release = wheel("sglang", "0.5.20").path
    code = (installed_as(release, "0.5.20") +
            "import json\nfrom initorch_sglang.calls import CALLS, installed_layout\n"
            "print(json.dumps([installed_layout().name,\n"
            "                  [c.target for c in CALLS if c.step == 'bind_cpu_threads']]))\n")
    result = run_in_sglang(code, XDG_CACHE_HOME=str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.strip().splitlines()[-1]) == [
        "runner_bootstrap",
        ["sglang.srt.model_executor.model_runner.ModelRunner.init_threads_binding"]]
    code, _, err = load_plugin(release, "0.5.20", tmp_path, INITORCH_SGLANG="drive")
    assert code == 1 and err.strip() == (
        "initorch-sglang: SGLang 0.5.20 (layout runner_bootstrap) has no init_parallel_runtime "
        "for drive mode to replace; use INITORCH_SGLANG=verify")


def test_an_audit_that_cannot_run_leaves_sglang_stock_and_is_not_cached(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Simulated: the profiles fail to load (another cause than the release itself)."""
    import initorch
    import initorch_sglang.version as version

    def broken(*args: object, **kwargs: object) -> object:
        raise RuntimeError("profile sglang.yaml: half written")

    release = wheel("sglang", "0.5.20").path
    monkeypatch.setattr(initorch, "load_plan", broken)
    monkeypatch.setattr(version, "installed_tree_path", lambda: release)
    monkeypatch.setattr(version, "installed_sglang", lambda: "0.5.20")
    verdict = version.sglang_verdict(cache_dir=tmp_path)
    assert not verdict.accepted and verdict.reason == (
        "the audit could not run: RuntimeError: profile sglang.yaml: half written")
    assert list(tmp_path.iterdir()) == []
