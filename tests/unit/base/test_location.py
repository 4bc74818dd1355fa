"""initorch.location: how messages show where something was declared."""

from __future__ import annotations

import os

from initorch.location import SourceLocation, caller_location, display_path


def test_a_path_below_the_working_directory_says_it_is_relative(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert display_path(tmp_path / "profiles" / "npu.yaml") == os.path.join(
        ".", "profiles", "npu.yaml")
    assert display_path("mine.yaml") == os.path.join(".", "mine.yaml")


def test_a_path_elsewhere_is_absolute(tmp_path, monkeypatch):
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    assert display_path(os.path.join("..", "other.yaml")) == str(tmp_path / "other.yaml")
    assert display_path(tmp_path / "other.yaml") == str(tmp_path / "other.yaml")


def test_locations_render_as_path_line_column():
    assert str(SourceLocation("./p.yaml", 3, 5)) == "./p.yaml:3:5"
    assert str(SourceLocation("./p.yaml", 3)) == "./p.yaml:3"
    assert str(SourceLocation("<command line>")) == "<command line>"


def test_caller_location_is_never_a_bare_relative_path():
    where = caller_location(depth=1)
    assert where.path in (os.path.join(".", "tests", "unit", "base", "test_location.py"), __file__)
    assert where.path.startswith((".", os.sep))


def _declared_here(depth: int) -> SourceLocation:
    return caller_location(depth)


def test_caller_location_names_the_line_depth_frames_up():
    inside, line = _declared_here(1), _declared_here.__code__.co_firstlineno + 1
    assert (inside.path, inside.line) == (display_path(__file__), line)
    called_from = _declared_here(2)
    assert called_from.line == test_caller_location_names_the_line_depth_frames_up.\
        __code__.co_firstlineno + 3
    assert _declared_here(10_000) == SourceLocation("<unknown>")


def test_caller_location_follows_the_working_directory(tmp_path, monkeypatch):
    """The shown path is kept per file and working directory: after a chdir a code
    file is shown as display_path shows it from there."""
    here = caller_location(1).path
    monkeypatch.chdir(tmp_path)
    assert caller_location(1).path == display_path(__file__) == os.path.abspath(__file__)
    monkeypatch.undo()
    assert caller_location(1).path == here


def test_a_path_in_the_installed_packages_is_shown_from_site_packages(tmp_path, monkeypatch):
    import sysconfig

    import yaml

    monkeypatch.chdir(tmp_path)
    purelib = sysconfig.get_paths()["purelib"]
    assert yaml.__file__.startswith(purelib)
    assert display_path(yaml.__file__) == "<site-packages>/yaml/__init__.py"
    # the working directory still wins: a checkout inside site-packages is ./...
    monkeypatch.chdir(purelib)
    assert display_path(yaml.__file__) == "./yaml/__init__.py"
