"""``initorch sglang check`` refuses only what SGLang 0.5.23 would fail on, and survives
hostile input: every case runs ``preflight`` in one SGLang process (SGLang's own parser
and resolver; the environment set per case), and the store's configuration is read as
SGLang's own ``MooncakeBaseStore._load_config`` reads it (the oracle below)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from initorch_sglang.store_config import store_source
from tests.sglang.oracle import ask

pytestmark = pytest.mark.sglang

PREFLIGHT_SCRIPT = r'''
import json, os, socket, sys
from initorch_sglang.options import Options
from initorch_sglang.preflight import preflight

listener = socket.socket()
listener.bind(("127.0.0.1", 0))
listener.listen(64)  # connects succeed from the backlog: a master that answers a connect
port = str(listener.getsockname()[1])
answers = []
for case in json.loads(sys.argv[1]):
    for name in [n for n in os.environ if n.startswith(("MOONCAKE_", "SGLANG_", "WORLD_SIZE"))]:
        del os.environ[name]
    os.environ.update({k: v.replace("{port}", port) for k, v in case["env"].items()})
    for path in case["files"]:  # a config file names the master too
        with open(path) as f:
            text = f.read()
        with open(path, "w") as f:
            f.write(text.replace("{port}", port))
    argv = [word.replace("{port}", port) for word in case["argv"]]
    result = preflight(argv, Options(case["mode"]), os.environ)
    answers.append({"refusals": list(result.refusals), "notes": list(result.notes),
                    "planned": result.plan is not None})
print(json.dumps(answers))
'''

CYRILLIC_O = "\u043e"


def launch(model: Path | str, *extra: str, tp: int = 1, store: bool = True) -> list[str]:
    argv = ["--model-path", str(model), "--device", "cpu", "--attention-backend",
            "torch_native", "--disable-cuda-graph", "--tp", str(tp)]
    if store:
        argv += ["--enable-hierarchical-cache", "--hicache-storage-backend", "mooncake",
                 "--hicache-mem-layout", "page_first", "--page-size", "16"]
    return [*argv, *extra]


def case(argv: list[str], mode: str = "verify", files: tuple[Path, ...] = (),
         **env: str) -> dict[str, Any]:
    return {"argv": argv, "mode": mode, "env": env, "files": [str(path) for path in files]}


def remote_code_model(tiny_model: Path, folder: Path, marker: Path) -> Path:
    """The tiny model, whose config.json names a module that writes ``marker`` on import."""
    shutil.copytree(tiny_model, folder)
    config = json.loads((folder / "config.json").read_text())
    config["auto_map"] = {"AutoConfig": "marker_config.MarkerConfig"}
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "marker_config.py").write_text(
        f"import pathlib\npathlib.Path({str(marker)!r}).write_text('imported')\n"
        "from transformers import LlamaConfig\n\n\n"
        "class MarkerConfig(LlamaConfig):\n    model_type = 'llama'\n")
    return folder


def test_preflight_refuses_only_what_sglang_would_fail_on(tiny_model: Path,
                                                          tmp_path: Path) -> None:
    marker = tmp_path / "imported"
    remote = remote_code_model(tiny_model, tmp_path / "remote-model", marker)
    store_file = tmp_path / "store.json"
    store_file.write_text(json.dumps({"master_server_address": "127.0.0.1:{port}"}))
    master = "127.0.0.1:{port}"
    extra = json.dumps({"master_server_address": master})
    cases = {
        # A2: WORLD_SIZE is the pod count a Kubeflow launcher exports; SGLang never reads it.
        "world_size": case(launch(tiny_model, tp=2, store=False), "off", WORLD_SIZE="4",
                           SGLANG_CPU_OMP_THREADS_BIND="0|1"),
        # A3: a hub id is neither downloaded nor judged (DeepSeek-V3 is MLA).
        "hub": case(launch("deepseek-ai/DeepSeek-V3", "--hicache-io-backend", "kernel_ascend"),
                    MOONCAKE_MASTER=master),
        # D1: --trust-remote-code does not import the auto_map module.
        "remote_code": case(launch(remote, "--trust-remote-code", store=False), "off"),
        # D2: a count is bounded before anything is sized by it.
        "huge_tp": case(launch(tiny_model, tp=10**30, store=False), "off"),
        # D4: each group a rank reads is a CPU list.
        "empty_groups": case(launch(tiny_model, tp=2, store=False), "off",
                             SGLANG_CPU_OMP_THREADS_BIND="||"),
        # A1: the master in the extra-config flag, then in the config file.
        "extra_config": case(launch(tiny_model, "--hicache-storage-backend-extra-config",
                                    extra)),
        "config_file": case(launch(tiny_model), files=(store_file,),
                            SGLANG_HICACHE_MOONCAKE_CONFIG_PATH=str(store_file),
                            MOONCAKE_MASTER="127.0.0.1:9"),  # the file wins
        # C: plain bytes that are no whole MiB; with HiCache off and on.
        "segment_off": case(launch(tiny_model, store=False), "off",
                            MOONCAKE_GLOBAL_SEGMENT_SIZE="1000000000"),
        "segment_on": case(launch(tiny_model), MOONCAKE_MASTER=master,
                           MOONCAKE_GLOBAL_SEGMENT_SIZE="1000000000"),
        # D6: a look-alike letter in the master's host.
        "look_alike": case(launch(tiny_model), MOONCAKE_MASTER=f"l{CYRILLIC_O}calhost:1"),
        # C: SGLang's standalone client (setup_dummy against MOONCAKE_CLIENT).
        "standalone": case(launch(tiny_model), MOONCAKE_CLIENT=master,
                           MOONCAKE_STANDALONE_STORAGE="true"),
        # C: a client without a master and without standalone storage fails in setup.
        "client_only": case(launch(tiny_model), MOONCAKE_CLIENT=master),
    }
    answers = dict(zip(cases, ask(PREFLIGHT_SCRIPT, list(cases.values())), strict=True))
    for name in ("world_size", "hub", "remote_code", "extra_config", "config_file",
                 "segment_off", "segment_on", "standalone"):
        assert answers[name]["refusals"] == [], (name, answers[name])
        assert answers[name]["planned"], name
    assert answers["hub"]["notes"] == [
        "the model 'deepseek-ai/DeepSeek-V3' is not a folder with a config.json on this "
        "machine: pre-flight does not download it, so SGLang's resolution and the checks "
        "that read the model were not run"]
    assert not marker.exists()
    [note] = answers["remote_code"]["notes"]
    assert note.startswith("the model's config.json names remote code (auto_map: AutoConfig)")
    assert answers["huge_tp"] == {"refusals": [
        "--tp '1000000000000000000000000000000' is larger than 1048576 (initorch's bound "
        "on ranks)"], "notes": [], "planned": False}
    [empty] = answers["empty_groups"]["refusals"]
    assert empty.startswith("SGLANG_CPU_OMP_THREADS_BIND='||': group 0 (rank 0's) is empty")
    [look_alike] = answers["look_alike"]["refusals"]
    assert look_alike.startswith(f"MOONCAKE_MASTER='l{CYRILLIC_O}calhost:1': contains the "
                                 "non-ASCII character")
    assert "U+043E CYRILLIC SMALL LETTER O" in look_alike and "at position 2" in look_alike
    assert any("gives a client address but no master" in line
               for line in answers["client_only"]["refusals"])


LOAD_CONFIG_SCRIPT = r'''
import json, os, sys, types
from sglang.srt.mem_cache.hybrid_cache.hybrid_cache_controller import HybridCacheController
from sglang.srt.mem_cache.storage.mooncake_store.mooncake_store import MooncakeBaseStore
answers = []
for case in json.loads(sys.argv[1]):
    for name in [n for n in os.environ if n.startswith(("MOONCAKE_", "SGLANG_HICACHE_"))]:
        del os.environ[name]
    os.environ.update(case["env"])
    try:
        extra = HybridCacheController.parse_storage_backend_extra_config(case["flag"])[0]
        config = MooncakeBaseStore()._load_config(types.SimpleNamespace(extra_config=extra))
    except Exception as error:
        answers.append({"error": type(error).__name__})
        continue
    answers.append({"master": config.master_server_address,
                    "client": config.client_server_address,
                    "standalone": bool(config.standalone_storage)})
print(json.dumps(answers))
'''


def test_the_store_configuration_is_read_as_sglangs_load_config_reads_it(
        tmp_path: Path) -> None:
    with_master = tmp_path / "master.json"
    with_master.write_text(json.dumps({"master_server_address": "10.0.0.8:1",
                                       "standalone_storage": False}))
    without = tmp_path / "neither.json"
    without.write_text(json.dumps({"protocol": "tcp"}))
    flag_master = json.dumps({"master_server_address": "10.0.0.7:1"})
    cases = [
        {"flag": None, "env": {"MOONCAKE_MASTER": "10.0.0.9:1"}},
        {"flag": flag_master, "env": {"MOONCAKE_MASTER": "10.0.0.9:1",
                                      "SGLANG_HICACHE_MOONCAKE_CONFIG_PATH": str(with_master)}},
        {"flag": json.dumps({"tenant_id": "t"}),  # no address: the flag is passed over
         "env": {"SGLANG_HICACHE_MOONCAKE_CONFIG_PATH": str(with_master)}},
        {"flag": None, "env": {"SGLANG_HICACHE_MOONCAKE_CONFIG_PATH": str(without),
                               "MOONCAKE_MASTER": "10.0.0.9:1"}},
        {"flag": None, "env": {"MOONCAKE_CLIENT": "10.0.0.6:2",
                               "MOONCAKE_STANDALONE_STORAGE": "true"}},
        {"flag": None, "env": {"MOONCAKE_CLIENT": "10.0.0.6:2", "MOONCAKE_MASTER": "10.0.0.9:1"}},
        {"flag": None, "env": {}},
        {"flag": json.dumps({"client_server_address": "10.0.0.6:2",
                             "standalone_storage": True}), "env": {}},
    ]
    for given, sglang in zip(cases, ask(LOAD_CONFIG_SCRIPT, cases), strict=True):
        ours = store_source(SimpleNamespace(hicache_storage_backend_extra_config=given["flag"]),
                            given["env"])
        if "error" in sglang:  # SGLang refuses it at start-up: pre-flight must refuse too
            assert ours.problem is not None, (given, sglang)
            continue
        assert (ours.master, ours.client, ours.standalone) == (
            sglang["master"], sglang["client"], sglang["standalone"]), given


SEGMENT_SCRIPT = r'''
import json, sys
from sglang.srt.mem_cache.storage.mooncake_store.mooncake_store import (
    _parse_global_segment_size,
)
answers = []
for value in json.loads(sys.argv[1]):
    try:
        answers.append(_parse_global_segment_size(value))
    except Exception as error:
        answers.append(type(error).__name__)
print(json.dumps(answers))
'''


def test_the_segment_size_is_parsed_as_sglang_parses_it() -> None:
    """initorch's reading (``initorch.steps.mooncake_env.segment_bytes``, which the
    integration uses through ``initorch.steps.segment_mib``) against SGLang's own parser."""
    from initorch.steps.mooncake_env import segment_bytes

    values: list[object] = ["1000000000", "1gb", " 2GB ", "gb", "4 gigs", "1_000",
                            "\u0663", 5, "-1", "1.5gb", 3.0e9, "0"]
    for value, sglang in zip(values, ask(SEGMENT_SCRIPT, values), strict=True):
        if isinstance(sglang, str):  # SGLang raises: initorch refuses it too
            with pytest.raises(ValueError):
                segment_bytes(value, "MOONCAKE_GLOBAL_SEGMENT_SIZE")
        else:
            assert segment_bytes(value, "MOONCAKE_GLOBAL_SEGMENT_SIZE") == sglang, value
