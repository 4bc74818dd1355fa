"""Hostile or broken releases given to ``initorch sglang audit`` (issue 27).

Each one gives one line naming the file, exit 2 (never "clean", never an internal error),
in bounded time and memory: what is read or inflated per file is capped
(``initorch.kit.MAX_FILE_BYTES``).  The trees are made here; each is the smallest
that reaches the file under test (SGLang's marker ``srt/managers/scheduler.py`` plus the
file the layout recognition reads).
"""

from __future__ import annotations

import argparse
import zipfile
from pathlib import Path

import pytest

from initorch.kit import MAX_FILE_BYTES
from initorch_sglang.cli import cmd_audit
from initorch_sglang.drift import open_tree
from initorch_sglang.layouts import recognise

BOOTSTRAP = "srt/distributed/bootstrap.py"
SCHEDULER = "class Scheduler:\n    def __init__(self):\n        init_parallel_runtime()\n"


def audit(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    code = cmd_audit(argparse.Namespace(device="npu", json=False, sources=[path]),
                     registry=None)  # type: ignore[arg-type]
    return code, [line for line in capsys.readouterr().out.splitlines()
                  if line.startswith("UNREADABLE")]


def tree_with(root: Path, bootstrap: bytes) -> Path:
    package = root / "sglang"
    (package / "srt" / "managers").mkdir(parents=True)
    (package / "srt" / "distributed").mkdir(parents=True)
    (package / "srt" / "managers" / "scheduler.py").write_text(SCHEDULER)
    (package / BOOTSTRAP).write_bytes(bootstrap)
    return package


def wheel_with(path: Path, bootstrap: bytes, **how: int) -> Path:
    with zipfile.ZipFile(path, "w", compression=how.get("compression", zipfile.ZIP_DEFLATED)) \
            as wheel:
        wheel.writestr("sglang/srt/managers/scheduler.py", SCHEDULER)
        wheel.writestr(f"sglang/{BOOTSTRAP}", bootstrap)
    return path


def central_header(data: bytearray, name: str) -> int:
    """Offset of ``name``'s central directory header (PKWARE APPNOTE 4.3.12)."""
    central = data.index(b"PK\x01\x02")
    while data[central + 46:central + 46 + len(name)] != name.encode():
        central = data.index(b"PK\x01\x02", central + 4)
    return central


def test_a_merge_conflict_marker(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    package = tree_with(tmp_path, b"def init_parallel_runtime():\n<<<<<<< HEAD\n    pass\n")
    code, lines = audit(package, capsys)
    assert code == 2
    (line,) = lines  # SyntaxError's own words vary with the Python version
    assert line.startswith(f"UNREADABLE: {package / BOOTSTRAP}: not valid Python (")
    assert line.endswith("(bootstrap.py, line 2))")


def test_a_pep_263_latin_1_source_is_read_as_python_reads_it(tmp_path: Path) -> None:
    source = ("# -*- coding: latin-1 -*-\n# Copyright \xa9 SGLang\n"
              "def init_parallel_runtime():\n    pass\n").encode("latin-1")
    with pytest.raises(UnicodeDecodeError):
        source.decode()
    tree = open_tree(tree_with(tmp_path, source))
    assert "Copyright \xa9 SGLang" in (tree.text(BOOTSTRAP) or "")
    layout = recognise(tree)
    assert layout is not None and layout.name == "bootstrap"


def test_a_3_gib_sparse_file_is_not_read(tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    package = tree_with(tmp_path, b"")
    with open(package / BOOTSTRAP, "wb") as handle:
        handle.truncate(3 << 30)  # sparse: no disk, and reading it all would take 3 GiB
    code, lines = audit(package, capsys)
    assert code == 2
    assert lines == [f"UNREADABLE: {package / BOOTSTRAP}: more than {MAX_FILE_BYTES} bytes"]


def test_a_truncated_wheel(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    whole = wheel_with(tmp_path / "whole.whl", b"def init_parallel_runtime():\n    pass\n")
    cut = tmp_path / "sglang-0.5.99-py3-none-any.whl"
    cut.write_bytes(whole.read_bytes()[:-40])
    code, lines = audit(cut, capsys)
    assert code == 2
    assert lines == [f"UNREADABLE: {cut}: not a readable wheel (File is not a zip file)"]


def test_an_unknown_compression_method(tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    path = wheel_with(tmp_path / "sglang-0.5.99-py3-none-any.whl", b"x = 1\n",
                      compression=zipfile.ZIP_STORED)
    data = bytearray(path.read_bytes())
    # Method 99 (AE-x) in the bootstrap entry's local and central headers.
    with zipfile.ZipFile(path) as wheel:
        info = wheel.getinfo(f"sglang/{BOOTSTRAP}")
    data[info.header_offset + 8:info.header_offset + 10] = (99).to_bytes(2, "little")
    central = central_header(data, info.filename)
    data[central + 10:central + 12] = (99).to_bytes(2, "little")
    path.write_bytes(bytes(data))
    code, lines = audit(path, capsys)
    assert code == 2
    assert lines == [f"UNREADABLE: {path}: sglang/{BOOTSTRAP} cannot be read (That "
                     "compression method is not supported)"]


def test_an_encrypted_entry(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = wheel_with(tmp_path / "sglang-0.5.99-py3-none-any.whl", b"x = 1\n")
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as wheel:
        info = wheel.getinfo(f"sglang/{BOOTSTRAP}")
    # General-purpose flag bit 0 (encrypted) in the entry's central header.
    data[central_header(data, info.filename) + 8] |= 1
    path.write_bytes(bytes(data))
    code, lines = audit(path, capsys)
    assert code == 2
    (line,) = lines
    assert line.startswith(f"UNREADABLE: {path}: sglang/{BOOTSTRAP} cannot be read (File ")
    assert "is encrypted, password required" in line


def test_an_entry_that_inflates_past_the_cap(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """17 MiB of zeros deflate to about 17 kB; the entry is refused from its header,
    before any of it is inflated."""
    big = b"# " + b"0" * (MAX_FILE_BYTES + (1 << 20)) + b"\n"
    path = wheel_with(tmp_path / "sglang-0.5.99-py3-none-any.whl", big)
    assert path.stat().st_size < 100_000
    code, lines = audit(path, capsys)
    assert code == 2
    assert lines == [f"UNREADABLE: {path}: sglang/{BOOTSTRAP} inflates to {len(big)} bytes "
                     f"(more than {MAX_FILE_BYTES})"]


def test_drift_names_the_broken_file_and_exits_2(tmp_path: Path) -> None:
    from tests.sglang.server import initorch_in_sglang

    package = tree_with(tmp_path, b"def init_parallel_runtime():\n<<<<<<< HEAD\n    pass\n")
    result = initorch_in_sglang("sglang", "drift", str(package))
    assert result.returncode == 2, result.stderr
    assert f"initorch sglang drift: {package / BOOTSTRAP}: not valid Python (" in result.stderr


def test_an_unforeseen_failure_is_one_line_and_exit_2_not_70(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Metadata beside the package that is not text: no reading of ours expects it."""
    package = tree_with(tmp_path, b"def init_parallel_runtime():\n    pass\n")
    (tmp_path / "sglang-9.9.dist-info").mkdir()
    (tmp_path / "sglang-9.9.dist-info" / "METADATA").write_bytes(b"Version: \xff\xfe\n")
    code, lines = audit(package, capsys)
    assert code == 2
    (line,) = lines
    assert line.startswith(f"UNREADABLE: {package}: cannot be audited (UnicodeDecodeError: ")
