"""initorch.entry_points: the folders on sys.path read as importlib.metadata reads them, the
same entry points in the same order, and importlib.metadata asked wherever the two could
differ (a zip, a finder of its own, a name from metadata, a file it refuses)."""

from __future__ import annotations

import importlib.metadata
import sys
import sysconfig
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from initorch.entry_points import (
    InstalledEntryPoint,
    _read_path_folders,
    installed_entry_points,
)

GROUP = "initorch.plugins"


def importlib_answer(group: str) -> list[tuple[str, str, str]]:
    return [(entry.name, entry.value, entry.group)
            for entry in importlib.metadata.entry_points(group=group)]


def ours(group: str) -> list[tuple[str, str, str]]:
    return [(entry.name, entry.value, entry.group) for entry in installed_entry_points(group)]


class OnlyOnPath:
    """sys.path as the standard library's folders (which hold no distribution, and which
    importlib.metadata imports from lazily) and the folders a test adds: nothing
    installed."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        paths = sysconfig.get_paths()
        self._stdlib = [entry for entry in sys.path
                        if entry in (paths["stdlib"], paths["platstdlib"])
                        or entry.endswith("lib-dynload")]
        monkeypatch.setattr(sys, "path", list(self._stdlib))

    def append(self, folder: str) -> None:
        sys.path.append(folder)

    def reset(self) -> None:
        sys.path[:] = self._stdlib


@pytest.fixture
def only_on_path(monkeypatch: pytest.MonkeyPatch) -> OnlyOnPath:
    return OnlyOnPath(monkeypatch)


def dist(folder: Path, stem: str, entry_points: str | None, *, suffix: str = ".dist-info"
         ) -> Path:
    info = folder / f"{stem}{suffix}"
    info.mkdir(parents=True)
    name = stem.split("-", maxsplit=1)[0]
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n",
                                   encoding="utf-8")
    if entry_points is not None:
        (info / "entry_points.txt").write_text(entry_points, encoding="utf-8")
    return info


# --- generated folders: the same answer as importlib.metadata -------------------------------

_NAME_PARTS = st.sampled_from(["vendor", "Vendor", "npu", "x"])
_SEPARATOR = st.sampled_from(["-", "_", ".", "__", "-_"])
_DIST_NAME = st.builds(lambda a, sep, b: f"{a}{sep}{b}", _NAME_PARTS, _SEPARATOR, _NAME_PARTS) \
    | _NAME_PARTS
_LINE = st.one_of(
    st.builds(lambda name, value, pad: f"{pad}{name}{pad}={pad}{value}{pad}",
              st.sampled_from(["builtin", "vendor", "a b", "x"]),
              st.sampled_from(["pkg.mod:register", "pkg:obj.attr", "pkg", "pkg:f [extra]"]),
              st.sampled_from(["", " ", "\t"])),
    st.sampled_from(["", "# a comment", "   ", "; not a comment = but a line"]),
)
_SECTION = st.tuples(st.sampled_from([GROUP, "console_scripts", "other.group"]),
                     st.lists(_LINE, max_size=4))
_FILE = st.none() | st.builds(
    lambda head, sections: "\n".join(head + [f"[{name}]\n" + "\n".join(lines)
                                             for name, lines in sections]),
    st.lists(st.sampled_from(["# header", "", "stray = before any section"]), max_size=2),
    st.lists(_SECTION, max_size=3))
_DIST = st.tuples(_DIST_NAME, st.sampled_from(["-1.0", "-2.0", ""]),
                  st.sampled_from([".dist-info", ".egg-info"]), _FILE)
_FOLDERS = st.lists(st.lists(_DIST, max_size=5), min_size=1, max_size=3)


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(folders=_FOLDERS, group=st.sampled_from([GROUP, "console_scripts", "missing"]))
def test_generated_folders_read_as_importlib_metadata_reads_them(
        only_on_path: OnlyOnPath, folders: list[list[tuple[str, str, str, str | None]]],
        group: str):
    with tempfile.TemporaryDirectory() as tmp:  # new folders: importlib caches by folder
        only_on_path.reset()
        for index, dists in enumerate(folders):
            folder = Path(tmp, f"site{index}")
            folder.mkdir()
            only_on_path.append(str(folder))
            for name, version, suffix, text in dists:
                if not (folder / f"{name}{version}{suffix}").exists():
                    dist(folder, f"{name}{version}", text, suffix=suffix)
        only_on_path.append(str(Path(tmp, "not-there")))
        found = _read_path_folders(group)
        assert found is not None
        assert [(e.name, e.value, e.group) for e in found] == importlib_answer(group)


def test_an_egg_info_file_and_a_missing_file_have_no_entry_points(only_on_path: OnlyOnPath,
                                                                  tmp_path: Path):
    (tmp_path / "old-1.0.egg-info").write_text("Name: old\n", encoding="utf-8")
    dist(tmp_path, "bare-1.0", None)
    dist(tmp_path, "real-1.0", f"[{GROUP}]\nreal = real:register\n")
    only_on_path.append(str(tmp_path))
    assert _read_path_folders(GROUP) == [InstalledEntryPoint("real", "real:register", GROUP)]
    assert ours(GROUP) == importlib_answer(GROUP)


# --- what only importlib.metadata reads as it does: asked, same answer ----------------------

def test_a_zip_on_sys_path_is_read_by_importlib_metadata(only_on_path: OnlyOnPath,
                                                         tmp_path: Path):
    archive = tmp_path / "plugins.zip"
    with zipfile.ZipFile(archive, "w") as zipped:
        zipped.writestr("zipped-1.0.dist-info/METADATA", "Name: zipped\nVersion: 1.0\n")
        zipped.writestr("zipped-1.0.dist-info/entry_points.txt",
                        f"[{GROUP}]\nzipped = zipped:register\n")
    only_on_path.append(str(archive))
    assert _read_path_folders(GROUP) is None
    assert ours(GROUP) == importlib_answer(GROUP) == [("zipped", "zipped:register", GROUP)]


def test_a_suffix_not_in_lower_case_is_named_from_its_metadata(only_on_path: OnlyOnPath,
                                                               tmp_path: Path):
    dist(tmp_path, "Loud-1.0", f"[{GROUP}]\nloud = loud:register\n", suffix=".DIST-INFO")
    only_on_path.append(str(tmp_path))
    assert _read_path_folders(GROUP) is None
    assert ours(GROUP) == importlib_answer(GROUP)


def test_a_finder_that_finds_distributions_itself_is_asked(only_on_path: OnlyOnPath,
                                                           tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch):
    hidden = tmp_path / "hidden"
    dist(hidden, "hidden-1.0", f"[{GROUP}]\nhidden = hidden:register\n")

    class Finder:
        @staticmethod
        def find_distributions(context: object = None) -> Iterator[importlib.metadata.Distribution]:
            yield importlib.metadata.PathDistribution(hidden / "hidden-1.0.dist-info")

    monkeypatch.setattr(sys, "meta_path", [Finder(), *sys.meta_path])
    assert _read_path_folders(GROUP) is None
    assert ours(GROUP) == importlib_answer(GROUP) == [("hidden", "hidden:register", GROUP)]


@pytest.mark.parametrize("content", [
    pytest.param(f"[{GROUP}]\nno equals sign here\n".encode(), id="not name = value"),
    pytest.param(f"[{GROUP}]\nx = caf\xe9:register\n".encode("latin-1"), id="not UTF-8"),
])
def test_a_file_importlib_metadata_refuses_is_refused_as_it_does(
        only_on_path: OnlyOnPath, tmp_path: Path, content: bytes):
    info = dist(tmp_path, "odd-1.0", None)
    (info / "entry_points.txt").write_bytes(content)
    only_on_path.append(str(tmp_path))
    assert _read_path_folders(GROUP) is None
    with pytest.raises(Exception) as theirs:
        importlib_answer(GROUP)
    with pytest.raises(type(theirs.value)):
        installed_entry_points(GROUP)


# --- loading -----------------------------------------------------------------------------------

@pytest.mark.parametrize(("value", "expected"), [
    ("os.path:join", "join"),
    ("os:path.join", "join"),
    ("os.path", "posixpath"),
    ("os.path : join [extra]", "join"),
])
def test_load_imports_what_importlib_metadata_would(value: str, expected: str):
    loaded = InstalledEntryPoint("x", value, GROUP).load()
    theirs = importlib.metadata.EntryPoint("x", value, GROUP).load()
    assert loaded is theirs and loaded.__name__ == expected


def test_a_value_that_names_no_module_says_so():
    with pytest.raises(ValueError, match=r"entry point broken = ':register' names no module"):
        InstalledEntryPoint("broken", ":register", GROUP).load()
