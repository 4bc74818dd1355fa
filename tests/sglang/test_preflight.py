"""``initorch sglang check``: SGLang's own parser and resolver, then each refusal seen here."""

from __future__ import annotations

import json
from pathlib import Path

from tests.sglang.server import Master, initorch_in_sglang, launch_arguments


def test_every_failure_seen_here_is_refused_before_launch(tiny_model: Path) -> None:
    arguments = launch_arguments(tiny_model, 30000, tp=2)
    arguments[arguments.index("page_first")] = "layer_first"
    result = initorch_in_sglang(
        "sglang", "check", "--", *arguments, "--nnodes", "3",
        "--hicache-io-backend", "kernel_ascend",
        MOONCAKE_GLOBAL_SEGMENT_SIZE="4 gigs", MOONCAKE_MASTER="127.0.0.1:9")
    assert result.returncode == 2, result.stderr
    refused = [line.removeprefix("initorch sglang check: refused: ")
               for line in result.stderr.splitlines() if "refused: " in line]
    assert [line.split(":")[0].split(" ")[0] for line in refused] == [
        "MOONCAKE_GLOBAL_SEGMENT_SIZE='4", "2", "the", "tp", "--hicache-mem-layout",
        "MOONCAKE_MASTER=127.0.0.1"]
    assert refused[0].startswith("MOONCAKE_GLOBAL_SEGMENT_SIZE='4 gigs': SGLang cannot parse")
    assert refused[1].startswith("2 CPU ranks on 1 NUMA node(s) and no "
                                 "SGLANG_CPU_OMP_THREADS_BIND")
    assert "would fall through to cudaHostRegister" in refused[2]
    assert refused[3].startswith("tp 2 x pp 1 = 2 rank(s) do not split over --nnodes 3")
    assert "'Mooncake layer_first multi-buffer is only supported for MLA host KV pool'" \
        in refused[4]
    assert refused[5].startswith("MOONCAKE_MASTER=127.0.0.1:9: the master does not answer")
    assert result.stdout.rstrip().endswith("pre-flight: 6 problem(s); the launch would fail")


def test_a_launch_that_would_start_gets_its_plan(tiny_model: Path, master: Master) -> None:
    result = initorch_in_sglang(
        "sglang", "check", "--json", "--", *launch_arguments(tiny_model, 30000, tp=2),
        INITORCH_SGLANG="verify", SGLANG_CPU_OMP_THREADS_BIND="0|1",
        MOONCAKE_MASTER=master.address, MOONCAKE_GLOBAL_SEGMENT_SIZE="1gb")
    assert result.returncode == 0, result.stderr
    outcome = json.loads(result.stdout[result.stdout.index("{"):])
    assert outcome["ok"] and outcome["refusals"] == []
    steps = [step["name"] for step in outcome["plan"]["steps"]]
    assert steps.index("init_shared_mooncake_transfer_engine") < \
        steps.index("init_torch_distributed") < steps.index("sglang_load_model") < \
        steps.index("alloc_host_mem_pool")
    assert "--set parallel.tp_size=2" in outcome["selection"]
    assert outcome["not_checked"] == []


def test_what_pre_flight_could_not_judge_is_said_not_refused(tiny_model: Path) -> None:
    arguments = launch_arguments(tiny_model, 30000, tp=1)
    arguments[arguments.index(str(tiny_model))] = "some-org/some-model"  # a hub id
    result = initorch_in_sglang("sglang", "check", "--", *arguments,
                                MOONCAKE_MASTER="127.0.0.1:9")
    notes = [line for line in result.stderr.splitlines()
             if line.startswith("initorch sglang check: not checked: ")]
    assert len(notes) == 1 and "some-org/some-model" in notes[0]
