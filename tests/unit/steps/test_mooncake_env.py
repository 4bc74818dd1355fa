"""SGLang's Mooncake variables (``steps/mooncake_env.py``), read as SGLang 0.5.23 reads
them, and only where the plan runs the store (``initorch plan``)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from initorch.steps.mooncake_env import read_master, segment_mib

RunCli = Callable[..., tuple[int, str, str]]
NO_STORE = ("--set", "hicache.enabled=false")  # the cpu profile plans the store otherwise
CYRILLIC_P = "\u0420"


@pytest.fixture(autouse=True)
def _no_inherited_store_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for name in [n for n in os.environ if n.startswith(("MOONCAKE_", "SGLANG_HICACHE_"))]:
        monkeypatch.delenv(name)


@pytest.mark.parametrize(("variable", "value"), [
    ("MOONCAKE_GLOBAL_SEGMENT_SIZE", "lots"),
    ("SGLANG_HICACHE_MOONCAKE_REUSE_TE", "maybe"),
    ("MOONCAKE_LOCAL_HOSTNAME", "two words"),  # read, then refused by the setting's pattern
    ("MOONCAKE_CLIENT", "127.0.0.1:50052"),  # a client and no master: SGLang's setup fails
    ("MOONCAKE_TE_META_DATA_SERVER", f"{CYRILLIC_P}2PHANDSHAKE"),
])
def test_a_store_variable_refuses_only_a_plan_that_runs_the_store(
        run_cli: RunCli, monkeypatch: pytest.MonkeyPatch, variable: str, value: str) -> None:
    monkeypatch.setenv(variable, value)
    code, _, err = run_cli("plan", "-p", "cpu", *NO_STORE)
    assert code == 0, err
    code, _, err = run_cli("plan", "-p", "cpu")
    assert code == 2 and variable in err, err


def test_a_look_alike_character_is_named_with_its_position(
        run_cli: RunCli, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MOONCAKE_TE_META_DATA_SERVER", f"{CYRILLIC_P}2PHANDSHAKE")
    code, _, err = run_cli("plan", "-p", "cpu")
    assert code == 2
    assert "U+0420 CYRILLIC CAPITAL LETTER ER" in err and "at position 1" in err


@pytest.mark.parametrize(("text", "mib"), [
    ("1000000000", 953),  # SGLang accepts any byte count; initorch rounds down to MiB
    ("1gb", 1024), (" 2GB ", 2048), ("1073741824", 1024), (3 * 2**20 + 5, 3),
])
def test_the_segment_is_read_as_sglang_reads_it(text: object, mib: int) -> None:
    assert segment_mib(text, "MOONCAKE_GLOBAL_SEGMENT_SIZE") == mib


@pytest.mark.parametrize("text", ["gb", "4 gigs", "1.5gb", "-1", "0", "1000"])
def test_a_segment_sglang_cannot_parse_or_initorch_cannot_hold_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match=rf"^MOONCAKE_GLOBAL_SEGMENT_SIZE='{text}' is "):
        segment_mib(text, "MOONCAKE_GLOBAL_SEGMENT_SIZE")


def test_a_segment_in_whole_bytes_plans_where_it_stopped_the_launch(
        run_cli: RunCli, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MOONCAKE_GLOBAL_SEGMENT_SIZE", "1000000000")
    code, out, err = run_cli("settings", "-p", "cpu", "--json")
    assert code == 0, err
    rows = {row["key"]: row for row in json.loads(out)}
    assert rows["mooncake.store.global_segment_mb"]["value"] == 953


def test_mooncake_client_is_read_as_sglang_reads_it(tmp_path: Path) -> None:
    master, client = "10.0.0.7:50051", "10.0.0.7:50052"
    # A master beside a client: SGLang's store sets up against the master.
    assert read_master({"MOONCAKE_MASTER": master, "MOONCAKE_CLIENT": client}) == \
        (master, "MOONCAKE_MASTER")
    with pytest.raises(ValueError, match="MOONCAKE_CLIENT is set but no master"):
        read_master({"MOONCAKE_CLIENT": client})
    with pytest.raises(ValueError, match=r"standalone store client \(setup_dummy against "
                                         r"'10\.0\.0\.7:50052'"):
        read_master({"MOONCAKE_CLIENT": client, "MOONCAKE_STANDALONE_STORAGE": "true"})
    config = tmp_path / "store.json"
    config.write_text(json.dumps({"client_server_address": client}))
    with pytest.raises(ValueError, match="MOONCAKE_CLIENT is set but no master"):
        read_master({"SGLANG_HICACHE_MOONCAKE_CONFIG_PATH": str(config)})
    config.write_text(json.dumps({"protocol": "tcp"}))
    with pytest.raises(ValueError, match="neither master_server_address nor "
                                         "client_server_address"):
        read_master({"SGLANG_HICACHE_MOONCAKE_CONFIG_PATH": str(config)})
    assert read_master({}) is None  # the profile's master ("local")


def test_settings_without_a_plan_still_refuse_a_variable_they_cannot_read(
        run_cli: RunCli, monkeypatch: pytest.MonkeyPatch) -> None:
    """``initorch settings`` plans no steps, so no step is known not to read it."""
    monkeypatch.setenv("MOONCAKE_GLOBAL_SEGMENT_SIZE", "lots")
    code, _, err = run_cli("settings", "-p", "cpu", *NO_STORE)
    assert code == 2 and "MOONCAKE_GLOBAL_SEGMENT_SIZE='lots'" in err
