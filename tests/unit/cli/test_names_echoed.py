"""Every message that echoes a name the user typed or wrote quotes it through one place
(:func:`initorch.printable.shown`): escaped, so that a line break in a step name cannot
print a forged ``run: ok`` line, and shortened, so that a 100 KB name is one readable
line (issue 27)."""

from __future__ import annotations

from pathlib import Path

import pytest

from initorch.printable import SHOWN_LIMIT, shown
from tests.support.commands import initorch_command
from tests.support.profiles import write

FORGED = "x\nrun: ok in 1.000s"
HUGE = "a" * 100_000


def test_shown_escapes_and_shortens() -> None:
    assert shown(FORGED) == "x\\nrun: ok in 1.000s"
    assert shown("\x1b[2J") == "\\x1b[2J"
    assert shown("plain") == "plain"
    cut = shown(HUGE)
    assert len(cut) <= SHOWN_LIMIT and "[100000 characters]" in cut
    assert shown("b" * SHOWN_LIMIT) == "b" * SHOWN_LIMIT  # at the limit: whole
    assert "\n" not in shown("\n" * 1000)


def one_line(err: str, *fragments: str) -> str:
    lines = err.splitlines()
    assert len(lines) == 1, err[:2000]
    assert lines[0].startswith("initorch: error: ")
    assert not any(line.startswith("run: ok") for line in lines)
    for fragment in fragments:
        assert fragment in lines[0], lines[0][:2000]
    return lines[0]


@pytest.mark.parametrize("argv", [
    ("explain", FORGED, "-p", "cpu"),
    ("explain", "set_device", FORGED, "-p", "cpu"),
    ("plan", "-p", FORGED),
    ("plan", "-p", "cpu", "--set", f"{FORGED}=1"),
    ("plan", "-p", "cpu", "--device", FORGED),
    ("plan", "--plugin", FORGED),
], ids=["explain", "explain-second", "profile", "set-key", "device", "plugin"])
def test_a_name_with_a_line_break_stays_on_its_line(run_cli, argv: tuple[str, ...]) -> None:
    code, out, err = run_cli(*argv)
    assert (code, out) == (2, "")
    one_line(err, "x\\nrun: ok in 1.000s")


@pytest.mark.parametrize("argv", [
    ("explain", HUGE, "-p", "cpu"),
    ("plan", "-p", HUGE),
    ("plan", "-p", "cpu", "--set", f"{HUGE}=1"),
], ids=["explain", "profile", "set-key"])
def test_a_huge_name_is_shortened(run_cli, argv: tuple[str, ...]) -> None:
    code, out, err = run_cli(*argv)
    assert (code, out) == (2, "")
    line = one_line(err, "[100000 characters]")
    assert len(line) < 2000


@pytest.mark.parametrize(("argv", "fragment"), [
    (("steps", FORGED), "unrecognized arguments: x\\nrun: ok in 1.000s"),
    (("plan", "-p", "cpu", f"--{FORGED}"), "unrecognized arguments: --x\\nrun: ok"),
    (("steps", HUGE), "...[100024 characters]..."),
], ids=["argument", "option", "huge"])
def test_usage_errors_quote_arguments_on_one_short_line(argv: tuple[str, ...],
                                                        fragment: str) -> None:
    # argparse's own messages, in a real process (argparse exits from inside main).
    result = initorch_command(*argv)
    assert (result.returncode, result.stdout) == (2, "")
    last = result.stderr.splitlines()[-1]
    assert last.startswith("initorch: error: ") and fragment in last, last[:2000]
    assert not any(line.startswith("run: ok") for line in result.stderr.splitlines())
    assert len(last) < 2000


@pytest.mark.parametrize(("text", "fragment"), [
    ('extends: cpu\nsteps:\n  "bad\\nrun: ok": {}\n', "bad\\nrun: ok"),
    ('extends: cpu\nsteps:\n  set_device: {after: ["no\\nrun: ok"]}\n', "no\\nrun: ok"),
    ('extends: cpu\n"unknown\\nrun: ok": 1\n', "unknown\\nrun: ok"),
    ('extends: cpu\nconfig:\n  "odd\\nrun: ok": 1\n', "odd\\nrun: ok"),
    ('extends: cpu\nenv:\n  "A\\nrun: ok": 1\n', "A\\nrun: ok"),
], ids=["step", "edge-target", "top-level-key", "setting-key", "env-name"])
def test_names_written_in_a_profile_stay_on_their_line(run_cli, tmp_path: Path, text: str,
                                                       fragment: str) -> None:
    path = write(tmp_path, "p.yaml", text)
    code, out, err = run_cli("plan", "-p", str(path))
    assert (code, out) == (2, "")
    one_line(err, fragment)
