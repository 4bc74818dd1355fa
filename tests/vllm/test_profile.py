"""The ``vllm`` overlay beside the ``sglang`` one: the same Mooncake engine, opposite
orders, each with its engine's reason (``initorch explain``)."""

from __future__ import annotations

from collections.abc import Callable

PLUGINS = ("--plugin", "initorch_sglang.registration", "--plugin",
           "initorch_vllm.registration")


def test_explain_engine_before_the_process_group_in_sglang(
        run_cli: Callable[..., tuple[int, str, str]]) -> None:
    code, out, err = run_cli("explain", *PLUGINS, "--profile", "cpu", "--profile", "sglang",
                             "init_shared_mooncake_transfer_engine", "init_torch_distributed")
    assert code == 0, err
    assert out.startswith("init_shared_mooncake_transfer_engine runs before "
                          "init_torch_distributed because:")
    assert "[profile sglang," in out and "srt/distributed/bootstrap.py init_parallel_runtime" \
        in out


def test_explain_engine_after_the_process_group_in_vllm(
        run_cli: Callable[..., tuple[int, str, str]]) -> None:
    code, out, err = run_cli("explain", *PLUGINS, "--profile", "cpu", "--profile", "vllm",
                             "init_torch_distributed", "init_shared_mooncake_transfer_engine")
    assert code == 0, err
    assert out.startswith("init_torch_distributed runs before "
                          "init_shared_mooncake_transfer_engine because:")
    assert "[profile vllm," in out
    assert "mooncake_connector.py MooncakeConnectorWorker.__init__" in out
    assert "v1/engine/core.py:144 before :157" in out


def test_vllm_drops_sglangs_edge_and_hicache_steps(
        run_cli: Callable[..., tuple[int, str, str]]) -> None:
    code, out, err = run_cli("explain", *PLUGINS, "--profile", "cpu", "--profile", "vllm",
                             "init_shared_mooncake_transfer_engine", "init_torch_distributed")
    assert code != 0  # SGLang's order is not vLLM's
    assert "explain init_torch_distributed init_shared_mooncake_transfer_engine" in err
    code, out, err = run_cli("explain", *PLUGINS, "--profile", "cpu", "--profile", "vllm",
                             "init_mooncake_store")
    assert code == 0, err
    assert "disabled by profile vllm" in out
