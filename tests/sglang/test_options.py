"""The environment a launch uses to ask for the integration, and the version gate."""

from __future__ import annotations

import pytest

from initorch_sglang.options import Options, OptionsError, read_options
from initorch_sglang.version import KNOWN_SGLANG, UnknownSGLangError, check_sglang_version


def test_nothing_asked_is_off() -> None:
    assert read_options({}) == Options()
    assert not read_options({"INITORCH_SGLANG": ""}).active


def test_every_option_is_read() -> None:
    options = read_options({
        "INITORCH_SGLANG": "Drive", "INITORCH_SGLANG_PROFILE": "npu",
        "INITORCH_SGLANG_ON_VIOLATION": "warn", "INITORCH_SGLANG_REPORT": "r-{rank}.json",
        "INITORCH_SGLANG_TRACE": "t-{rank}.json",
        "INITORCH_SGLANG_SET": "a.b=1, c.d=x", "INITORCH_SGLANG_RENDEZVOUS": "127.0.0.1:9",
        "INITORCH_SGLANG_STATUS": "/run/s-{rank}.json", "INITORCH_SGLANG_PROGRESS": "30"})
    assert options == Options("drive", "npu", False, "r-{rank}.json", "t-{rank}.json",
                              ("a.b=1", "c.d=x"), "127.0.0.1:9", "/run/s-{rank}.json", 30.0)


@pytest.mark.parametrize(("value", "seconds"), [(None, 10.0), ("", 10.0), (" OFF ", None),
                                                ("0", None), ("2.5", 2.5)])
def test_progress_lines_are_on_by_default_every_ten_seconds(value: str | None,
                                                            seconds: float | None) -> None:
    environ = {"INITORCH_SGLANG": "verify"}
    if value is not None:
        environ["INITORCH_SGLANG_PROGRESS"] = value
    assert read_options(environ).progress_s == seconds


@pytest.mark.parametrize("value", ["soon", "-1", "inf", "nan"])
def test_a_bad_progress_value_names_its_variable(value: str) -> None:
    with pytest.raises(OptionsError, match=f"^initorch-sglang: INITORCH_SGLANG_PROGRESS: "
                                           f"'{value}'"):
        read_options({"INITORCH_SGLANG": "verify", "INITORCH_SGLANG_PROGRESS": value})


@pytest.mark.parametrize(("variable", "value"), [("INITORCH_SGLANG", "watch"),
                                                  ("INITORCH_SGLANG_ON_VIOLATION", "ignore")])
def test_a_bad_value_names_its_variable(variable: str, value: str) -> None:
    with pytest.raises(OptionsError, match=f"{variable}={value!r} is not"):
        read_options({"INITORCH_SGLANG": "verify", variable: value})


def test_an_unknown_sglang_is_refused_in_one_line() -> None:
    assert check_sglang_version(KNOWN_SGLANG[0]) == KNOWN_SGLANG[0]
    with pytest.raises(UnknownSGLangError) as caught:
        check_sglang_version("0.6.0")
    assert str(caught.value) == (
        "initorch-sglang: SGLang 0.6.0 is not supported (known: 0.5.23); install "
        "sglang==0.5.23, or unset INITORCH_SGLANG to start SGLang without initorch")
    assert "\n" not in str(caught.value)
