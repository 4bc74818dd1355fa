"""SGLang's Mooncake variables against SGLang 0.5.23's own ``MooncakeStoreConfig``.

For each environment SGLang's ``MooncakeStore._load_config`` (``mooncake_store.py:324-344``:
the JSON file of ``SGLANG_HICACHE_MOONCAKE_CONFIG_PATH``, else the variables) runs in
its venv; initorch reads the same environment into settings (``environment_settings``
over the built-in steps' readers).  Every value initorch takes must be SGLang's; a
variable that is not set leaves the profile's value in initorch while SGLang takes its
own default (the documented precedence), and the test checks that too.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from initorch import Registry
from initorch.loading.compose import environment_settings
from tests.sglang.oracle import ask

pytestmark = pytest.mark.sglang

CONFIG_SCRIPT = r'''
import json, os, sys
from sglang.srt.environ import envs
from sglang.srt.mem_cache.storage.mooncake_store.mooncake_store import MooncakeStore
answers = []
for env in json.loads(sys.argv[1]):
    for name in [n for n in os.environ
                 if n.startswith(("MOONCAKE_", "SGLANG_HICACHE_")) or n == "LOCAL_HOSTNAME"]:
        del os.environ[name]
    os.environ.update(env)
    config = MooncakeStore._load_config(None, None)
    answers.append({
        "master": config.master_server_address, "protocol": config.protocol,
        "device": config.device_name, "metadata": config.metadata_server,
        "segment_bytes": config.global_segment_size, "hostname": config.local_hostname,
        "reuse": envs.SGLANG_HICACHE_MOONCAKE_REUSE_TE.get()})
print(json.dumps(answers))
'''

# initorch setting -> SGLang's field (the segment in MiB against bytes).
FIELDS = {"mooncake.master": "master", "device.mooncake_protocol": "protocol",
          "mooncake.store.device_name": "device", "mooncake.store.metadata_server": "metadata",
          "mooncake.store.hostname": "hostname", "mooncake.store.reuse_engine": "reuse"}
SEGMENT = "mooncake.store.global_segment_mb"


def cases(tmp_path: Path) -> list[dict[str, str]]:
    full_file = tmp_path / "full.json"
    full_file.write_text(json.dumps({
        "master_server_address": "10.0.0.7:50051", "protocol": "tcp", "device_name": "mlx5_1",
        "metadata_server": "http://10.0.0.7:8080/metadata", "global_segment_size": "2gb",
        "local_hostname": "10.0.0.8"}))
    partial_file = tmp_path / "partial.json"
    partial_file.write_text(json.dumps({"master_server_address": "10.0.0.7:50051",
                                        "global_segment_size": 536870912}))
    master = {"MOONCAKE_MASTER": "10.0.0.9:50051"}
    return [
        master,
        {**master, "MOONCAKE_PROTOCOL": "tcp", "MOONCAKE_DEVICE": "mlx5_0",
         "MOONCAKE_TE_META_DATA_SERVER": "http://10.0.0.9:8080/metadata",
         "MOONCAKE_GLOBAL_SEGMENT_SIZE": "4gb", "MOONCAKE_LOCAL_HOSTNAME": "10.0.0.2",
         "SGLANG_HICACHE_MOONCAKE_REUSE_TE": "no"},
        {**master, "MOONCAKE_GLOBAL_SEGMENT_SIZE": "1073741824", "LOCAL_HOSTNAME": "node-3",
         "SGLANG_HICACHE_MOONCAKE_REUSE_TE": "1"},
        {"SGLANG_HICACHE_MOONCAKE_CONFIG_PATH": str(full_file), **master,
         "MOONCAKE_DEVICE": "ignored-in-file-mode"},
        {"SGLANG_HICACHE_MOONCAKE_CONFIG_PATH": str(full_file), "MOONCAKE_LOCAL_HOSTNAME": "h"},
        {"SGLANG_HICACHE_MOONCAKE_CONFIG_PATH": str(partial_file), "MOONCAKE_PROTOCOL": "efa"},
    ]


def initorch_reads(env: dict[str, str]) -> dict[str, Any]:
    read = environment_settings(Registry.with_plugins().settings, env)
    return {item.key: item.value for item in read}


def test_initorch_reads_sglangs_mooncake_environment_as_sglang_does(tmp_path: Path) -> None:
    environments = cases(tmp_path)
    for env, sglang in zip(environments, ask(CONFIG_SCRIPT, environments), strict=True):
        ours = initorch_reads(env)
        for key, field in FIELDS.items():
            if key in ours:
                assert ours[key] == sglang[field], (env, key)
        if SEGMENT in ours:
            assert ours[SEGMENT] * 2**20 == sglang["segment_bytes"], env
        # What initorch leaves to the profile, SGLang takes from its own defaults.
        if "SGLANG_HICACHE_MOONCAKE_CONFIG_PATH" not in env:
            assert ("device.mooncake_protocol" in ours) == ("MOONCAKE_PROTOCOL" in env)
            assert (SEGMENT in ours) == ("MOONCAKE_GLOBAL_SEGMENT_SIZE" in env)
    assert initorch_reads(environments[3])["mooncake.master"] == "10.0.0.7:50051"  # the file's
    assert "mooncake.store.device_name" in initorch_reads(environments[3])
    assert initorch_reads(environments[3])["mooncake.store.device_name"] == "mlx5_1"
