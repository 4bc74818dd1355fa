"""The tiny server's front end reads ``Content-Length`` as ASCII digits only."""

from __future__ import annotations

import pytest

from tests.unit.examples.test_tiny_server import front_end, post, raw_request

__all__ = ["front_end"]  # the fixture, shared with the other front-end tests


@pytest.mark.parametrize(("length", "status", "said"), [
    ("²", 400, None),  # isdigit() is True, and int() raises
    ("٣", 400, None),  # int() reads it as 3
    ("9" * 5000, 413, "the body may have at most 1048576 bytes"),  # past int()'s digit limit
])
def test_a_length_that_is_not_ascii_digits_gets_an_answer_and_one_log_line(
        front_end: int, length: str, status: int, said: str | None,
        capfd: pytest.CaptureFixture[str]) -> None:
    code, answer = raw_request(front_end, post(b"{}", length))
    if said is None:  # http.server reads a header's UTF-8 bytes as Latin-1
        said = f"Content-Length {length.encode().decode('latin-1')!r} is not a whole number"
    assert (code, answer["error"]) == (status, said)
    logged = capfd.readouterr().err.splitlines()
    assert len(logged) == 1 and logged[0].startswith(f"tiny-server: {status} for POST /generate")
    assert "Traceback" not in logged[0]
