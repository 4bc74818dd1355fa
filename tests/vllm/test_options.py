"""The launch's options: off unless asked, one line naming the variable when malformed."""

from __future__ import annotations

import pytest

from initorch_vllm.options import Options, OptionsError, read_options
from initorch_vllm.plugin import load


def test_off_unless_asked() -> None:
    assert read_options({}) == Options()
    assert not read_options({"INITORCH_VLLM": " "}).active


def test_every_option() -> None:
    options = read_options({"INITORCH_VLLM": "Verify", "INITORCH_VLLM_PROFILE": "cpu, vllm",
                            "INITORCH_VLLM_ON_VIOLATION": "warn",
                            "INITORCH_VLLM_REPORT": "/tmp/r-{rank}.json",
                            "INITORCH_VLLM_STATUS": "/run/s-{rank}.json"})
    assert options == Options(mode="verify", profiles=("cpu", "vllm"),
                              stop_on_violation=False, report="/tmp/r-{rank}.json",
                              status="/run/s-{rank}.json", progress_s=10.0)
    assert read_options({"INITORCH_VLLM": "verify",
                         "INITORCH_VLLM_PROGRESS": "off"}).progress_s is None


def test_a_bad_progress_value_is_one_line() -> None:
    with pytest.raises(OptionsError, match=r"^initorch-vllm: INITORCH_VLLM_PROGRESS: 'x' is "
                                           r"neither seconds nor off$"):
        read_options({"INITORCH_VLLM": "verify", "INITORCH_VLLM_PROGRESS": "x"})


@pytest.mark.parametrize(("name", "value", "choices"), [
    ("INITORCH_VLLM", "drive", "off, verify"),
    ("INITORCH_VLLM_ON_VIOLATION", "ignore", "stop, warn"),
])
def test_a_bad_value_is_one_line(name: str, value: str, choices: str) -> None:
    with pytest.raises(OptionsError) as error:
        read_options({"INITORCH_VLLM": "verify", name: value})
    assert str(error.value) == f"initorch-vllm: {name}={value!r} is not one of {choices}"


def test_the_plugin_refuses_a_bad_value(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INITORCH_VLLM", "drive")
    with pytest.raises(SystemExit) as stopped:
        load()
    assert stopped.value.code == "initorch-vllm: INITORCH_VLLM='drive' is not one of off, verify"
