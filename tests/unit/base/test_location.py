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
