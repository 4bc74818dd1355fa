"""initorch.model.devices (and the known-type table of initorch.loading.selection): one place
normalises device strings, and an unknown type is an error, never a fallback."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from initorch.errors import DeviceError
from initorch.loading.selection import device_types, normalise_device
from initorch.plugin import DeviceRef, parse_device

KNOWN_TYPES = ("cpu", "cuda", "mps", "musa", "npu", "rocm", "xpu")


@pytest.fixture(scope="module")
def known():
    from initorch import Registry

    return device_types(Registry.with_plugins().profiles)


@dataclass
class FakeTorchDevice:
    """What torch.device exposes, without torch."""

    type: str
    index: int | None = None


def test_known_types_come_from_the_profiles(known):
    assert set(known.values()) == set(KNOWN_TYPES)
    assert known["hip"] == "rocm"
    assert all(known[t] == t for t in KNOWN_TYPES)


@pytest.mark.parametrize(("value", "expected"), [
    ("musa:0", DeviceRef("musa", 0)),
    ("NPU:3", DeviceRef("npu", 3)),
    ("cuda", DeviceRef("cuda", None)),
    ("  Cuda : 12 ", DeviceRef("cuda", 12)),
    ("hip:1", DeviceRef("rocm", 1)),
    ("HIP", DeviceRef("rocm", None)),
    ("rocm:0", DeviceRef("rocm", 0)),
    ("xpu:007", DeviceRef("xpu", 7)),
    ("mps", DeviceRef("mps", None)),
    (DeviceRef("npu", 2), DeviceRef("npu", 2)),
    (DeviceRef("HIP", 0), DeviceRef("rocm", 0)),
    (FakeTorchDevice("musa", 1), DeviceRef("musa", 1)),
    (FakeTorchDevice("cpu"), DeviceRef("cpu", None)),
])
def test_normalisation(known, value, expected):
    assert parse_device(value, known) == expected


def test_device_ref_text():
    assert str(DeviceRef("npu", 3)) == "npu:3"
    assert str(DeviceRef("cpu")) == "cpu"


@pytest.mark.parametrize(("spec", "expected"), [
    ("cuda:1", DeviceRef("cuda", 1)),
    ("xpu:2", DeviceRef("xpu", 2)),
    ("mps", DeviceRef("mps", None)),
    ("cpu", DeviceRef("cpu", None)),
    ("hip:0", DeviceRef("rocm", 0)),
])
def test_real_torch_devices(known, spec, expected):
    torch = pytest.importorskip("torch")
    assert parse_device(torch.device(spec), known) == expected


def test_torch_device_of_an_unknown_type_is_an_error(known):
    torch = pytest.importorskip("torch")
    with pytest.raises(DeviceError) as caught:
        parse_device(torch.device("meta"), known)
    assert "unknown device type 'meta'" in str(caught.value)


@pytest.mark.parametrize(("value", "guess"), [
    ("nup:0", "npu"), ("cudaa", "cuda"), ("foo", None), ("privateuseone:0", None),
])
def test_unknown_type_lists_the_known_ones(known, value, guess):
    with pytest.raises(DeviceError) as caught:
        parse_device(value, known)
    text = str(caught.value)
    assert f"unknown device type '{value.split(':')[0]}'" in text
    assert "known types: " + ", ".join(KNOWN_TYPES) in text
    assert (f"did you mean '{guess}'?" in text) if guess else ("did you mean" not in text)


def test_a_suggested_name_comes_before_the_closest_spelling(known):
    with pytest.raises(DeviceError, match="did you mean 'cuda'"):
        parse_device("gpu", known, {"gpu": "cuda"})
    with pytest.raises(DeviceError, match="did you mean 'xpu'"):
        parse_device("gpu", known)  # the closest spelling, which no one means


@pytest.mark.parametrize("value", [
    "", " ", ":0", "cuda:", "cuda:-1", "cuda:0:1", "cu da", "cuda:1.5", "cuda:x", "9npu",
    "npu-0", "cuda/0",
])
def test_malformed_strings(known, value):
    with pytest.raises(DeviceError) as caught:
        parse_device(value, known)
    assert f"malformed device string {value!r}" in str(caught.value)
    assert "TYPE:INDEX" in str(caught.value)


@pytest.mark.parametrize("value", [0, None, 1.5, ["cuda"], b"cuda"])
def test_values_that_are_not_devices(known, value):
    with pytest.raises(DeviceError) as caught:
        parse_device(value, known)
    assert f"cannot read a device from {type(value).__name__}" in str(caught.value)


def test_normalise_device_uses_the_catalog(builtin_registry):
    assert normalise_device(builtin_registry.profiles, "Hip:2") == DeviceRef("rocm", 2)


def _mixed_case(word: str, flips: list[bool]) -> str:
    return "".join(c.upper() if flip else c for c, flip in zip(word, flips, strict=True))


@st.composite
def spellings(draw: st.DrawFn) -> tuple[str, DeviceRef]:
    word = draw(st.sampled_from([*KNOWN_TYPES, "hip"]))
    text = _mixed_case(word, draw(st.lists(st.booleans(), min_size=len(word),
                                           max_size=len(word))))
    blank = st.sampled_from(["", " ", "\t", "  "])
    index = draw(st.none() | st.integers(0, 4096))
    if index is not None:
        text = f"{text}{draw(blank)}:{draw(blank)}{index}"
    canonical = "rocm" if word == "hip" else word
    return f"{draw(blank)}{text}{draw(blank)}", DeviceRef(canonical, index)


@settings(max_examples=200, deadline=None)
@given(spellings())
def test_case_and_blanks_do_not_matter(known, case):
    text, expected = case
    assert parse_device(text, known) == expected


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=20))
def test_any_string_is_a_device_or_a_device_error(known, text):
    try:
        ref = parse_device(text, known)
    except DeviceError:
        return
    assert ref.type in KNOWN_TYPES
    assert ref.index is None or ref.index >= 0
