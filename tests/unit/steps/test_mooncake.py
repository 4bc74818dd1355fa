"""The pure parts of the Mooncake steps: addresses, layouts, builds, transports, hostnames."""

from __future__ import annotations

import itertools
import json
import re
import socket
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from initorch.errors import StepError
from initorch.steps import host_pool
from initorch.steps.engine_hostname import choose_ascend_build
from initorch.steps.kv_layout import LAYOUTS, KvGeometry, resolve_layout
from initorch.steps.mooncake_build import MooncakeBuild, installed_build, scan_binary
from initorch.steps.mooncake_master import CORO_RPC_MAGIC, rpc_problem
from initorch.steps.network import (
    host_port,
    local_address_towards,
    split_host_port,
)
from initorch.steps.transports import installed_transports, transport_mismatch
from tests.support.fake_peers import MASTER_ANSWER, fake_peer
from tests.support.sockets import silent_server

# -- network -------------------------------------------------------------------------------


@pytest.mark.parametrize(("host", "port", "joined"), [
    ("10.0.0.5", 15001, "10.0.0.5:15001"),
    ("::1", 15001, "[::1]:15001"),
    ("[fe80::1]", 80, "[fe80::1]:80"),
    ("node-3", 12, "node-3:12"),
])
def test_host_port_brackets_ipv6(host: str, port: int, joined: str) -> None:
    assert host_port(host, port) == joined
    assert split_host_port(joined) == (host.strip("[]"), port)


@pytest.mark.parametrize("text", ["10.0.0.5", "::1:80", "[::1]80", "host:0", "host:65536",
                                  ":80", "host:x"])
def test_malformed_addresses_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        split_host_port(text)


@given(st.ip_addresses(), st.integers(1, 65535))
def test_host_port_round_trips(address: object, port: int) -> None:
    assert split_host_port(host_port(str(address), port)) == (str(address), port)


def test_the_local_address_is_the_one_that_reaches_the_peer(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HOST_IP", raising=False)
    monkeypatch.delenv("SGLANG_HOST_IP", raising=False)
    assert local_address_towards("127.0.0.1") == "127.0.0.1"
    outward = local_address_towards("192.0.2.1")  # TEST-NET-1: a route, not a packet
    assert outward != "127.0.0.1"
    assert outward in {info[4][0] for info in socket.getaddrinfo(socket.gethostname(), None)} \
        or outward.count(".") == 3
    monkeypatch.setenv("HOST_IP", "10.9.8.7")  # SGLang's override wins
    assert local_address_towards("127.0.0.1") == "10.9.8.7"


def test_an_unresolvable_peer_is_a_step_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from initorch.steps.engine_hostname import local_host

    monkeypatch.delenv("HOST_IP", raising=False)
    monkeypatch.delenv("SGLANG_HOST_IP", raising=False)
    with pytest.raises(StepError, match=r"cannot find the local address that reaches "
                                        r"no-such-host\.invalid"):
        local_host("auto", "no-such-host.invalid")
    assert local_host("10.1.2.3", "no-such-host.invalid") == "10.1.2.3"


def test_the_master_probe_reports_the_refusal() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    assert "Connection refused" in str(rpc_problem("127.0.0.1", port, 1.0))


def test_the_master_probe_refuses_a_server_that_accepts_and_never_answers() -> None:
    # A bare connect passed it, and the store's setup then waited 30 s x 20 (issue 19).
    with silent_server() as port:
        assert rpc_problem("127.0.0.1", port, 0.5) == \
            "it accepted the connection but did not answer an RPC within 0.5s"


def test_the_recorded_answer_is_what_a_master_sends() -> None:
    assert len(MASTER_ANSWER) == 56
    assert MASTER_ANSWER[0] == CORO_RPC_MAGIC


@pytest.mark.parametrize(("sends", "then", "problem"), [
    ((MASTER_ANSWER,), "hold", None),
    ((MASTER_ANSWER[:5], MASTER_ANSWER[5:]), "close", None),  # in pieces, then gone: fine
    ((b"HTTP/1.1 400 Bad Request\r\n\r\n",), "hold",
     "it answered, but not as Mooncake's RPC (coro_rpc): its answer began "
     "48 54 54 50 2f 31 2e 31 20 34 30 30 20 42 61 64"),
    # The right first byte, then junk (issue 27): one byte passed it.
    ((bytes([CORO_RPC_MAGIC]) + b"junk" * 10,), "hold",
     "it answered, but not as Mooncake's RPC (coro_rpc): its answer began "
     "15 6a 75 6e 6b 6a 75 6e 6b 6a 75 6e 6b 6a 75 6e"),
    ((bytes([CORO_RPC_MAGIC]) + bytes(15),), "hold",  # not an answer to our request
     "it answered, but not as Mooncake's RPC (coro_rpc): its answer began 15" + " 00" * 15),
    ((bytes([CORO_RPC_MAGIC]),), "close",
     "it hung up after 1 of the 16 bytes of its RPC answer"),
    ((MASTER_ANSWER[:20],), "close", "it hung up after 20 of the 56 bytes of its RPC answer"),
    ((), "close", "it closed the connection without answering an RPC"),
], ids=["master", "pieces", "http", "magic-then-junk", "other-sequence", "hangs-up-in-header",
        "hangs-up-in-body", "hangs-up-at-once"])
def test_the_master_probe_wants_a_whole_coro_rpc_answer(sends: tuple[bytes, ...], then: str,
                                                        problem: str | None) -> None:
    with fake_peer(*sends, then=then) as port:
        said = rpc_problem("127.0.0.1", port, 5.0)
    assert said == problem


def test_a_master_that_trickles_its_answer_is_too_slow() -> None:
    # One byte at a time, each within any per-read timeout: one byte passed it, and the
    # store's setup then waited until the watchdog's SIGKILL (issue 27).
    trickle = [MASTER_ANSWER[i:i + 1] for i in range(len(MASTER_ANSWER))]
    with fake_peer(*trickle, pause=0.3) as port:
        said = str(rpc_problem("127.0.0.1", port, 1.0))
    assert re.fullmatch(r"it answered too slowly: [0-9]+ of the 16 bytes of its RPC answer "
                        r"within 1s", said), said


# -- layouts ---------------------------------------------------------------------------------

def test_layout_names_are_sglangs() -> None:
    assert set(LAYOUTS) == {"layer_first", "page_first", "page_first_direct",
                            "page_first_kv_split", "page_head"}


@pytest.mark.parametrize(("requested", "backend", "io", "layout", "noted"), [
    ("page_first", "mooncake", "kernel", "page_first", False),
    ("page_first", "mooncake", "direct", "page_first_direct", True),  # layout/io rewrite
    ("layer_first", "mooncake", "kernel", "page_first", True),        # store rewrite
    ("layer_first", "mooncake", "direct", "page_first_direct", True),
    ("layer_first", "none", "kernel_ascend", "layer_first", False),   # no store: kept
    ("page_first_kv_spilt", "mooncake", "kernel_ascend", "page_first_kv_split", True),
    ("page_first_direct", "mooncake", "kernel", "page_first_direct", True),  # io -> direct
])
def test_layouts_are_rewritten_as_sglang_does(requested: str, backend: str, io: str,
                                              layout: str, noted: bool) -> None:
    choice = resolve_layout(requested, backend, io)
    assert choice.layout == layout
    assert bool(choice.notes) is noted


def test_the_misspelling_is_named_deprecated() -> None:
    (note,) = resolve_layout("page_first_kv_spilt", "mooncake", "kernel").notes
    assert "deprecated misspelling" in note and "page_first_kv_split" in note


@pytest.mark.parametrize(("requested", "io", "fragment"), [
    ("layer_first", "kernel_ascend", "not supported by the Mooncake store"),
    ("layer_frist", "kernel", "is not one of SGLang's layouts"),
    ("page_first", "kernel_npu", "is not one of SGLang's"),
])
def test_layouts_sglang_would_fail_on_are_refused(requested: str, io: str, fragment: str
                                                  ) -> None:
    with pytest.raises(StepError, match=fragment):
        resolve_layout(requested, "mooncake", io)


@given(st.sampled_from(["page_first", "page_first_direct", "page_head", "page_first_kv_split"]),
       st.integers(1, 64))
def test_pages_never_overlap_and_stay_inside_the_pool(layout: str, pages: int) -> None:
    geometry = KvGeometry()
    nbytes = pages * sum(geometry.buffer_sizes(layout)) + 123  # a ragged tail is left over
    assert geometry.pages_in(layout, nbytes) == pages
    ranges = sorted(buffer for page in range(pages)
                    for buffer in geometry.page_buffers(layout, 4096, nbytes, page))
    for (start, size), (following, _) in itertools.pairwise(ranges):
        assert start + size <= following
    last_start, last_size = ranges[-1]
    assert ranges[0][0] >= 4096 and last_start + last_size <= 4096 + nbytes
    with pytest.raises(StepError):
        geometry.page_buffers(layout, 4096, nbytes, pages)


def test_keys_follow_sglangs_naming() -> None:
    geometry = KvGeometry()
    assert geometry.keys("page_first", "p", 3, 1) == ("p-p3_1_k", "p-p3_1_v")
    assert geometry.keys("page_first_kv_split", "p", 3, 1) == ("p-p3_r1_k",)


# -- builds and transports -----------------------------------------------------------------------

def test_the_installed_cpu_wheel_has_tcp_and_rdma_but_no_ascend() -> None:
    pytest.importorskip("mooncake")
    build = installed_build()
    assert {"tcp", "rdma"} <= build.protocols
    assert build.ascend is None


@pytest.mark.parametrize(("content", "ascend"), [
    (b"..HcclTransport..TcpTransport..", "hccl"),
    (b"..AscendDirectTransport..", "ascend_direct"),
    (b"..RdmaTransport..", None),
])
def test_the_build_is_read_from_the_binary(tmp_path: Path, content: bytes,
                                           ascend: str | None) -> None:
    binary = tmp_path / f"engine-{ascend}.so"
    binary.write_bytes(b"\x7fELF" + content)
    assert installed_build(str(binary)).ascend == ascend


def build_with(*classes: str) -> MooncakeBuild:
    return MooncakeBuild("engine.so", frozenset(classes))


@pytest.mark.parametrize(("setting", "classes", "legacy_env", "chosen"), [
    ("auto", ("AscendDirectTransport",), None, "ascend_direct"),
    ("auto", ("HcclTransport",), None, "hccl"),
    ("auto", ("HcclTransport",), "1", "hccl"),
    ("auto", (), None, "ascend_direct"),       # unknown build: the shipped one
    ("auto", (), "1", "hccl"),                 # unknown build, SGLang's switch says legacy
    ("hccl", (), None, "hccl"),
])
def test_the_ascend_build_follows_the_installed_binary(
        monkeypatch: pytest.MonkeyPatch, setting: str, classes: tuple[str, ...],
        legacy_env: str | None, chosen: str) -> None:
    if legacy_env is None:
        monkeypatch.delenv("ENABLE_ASCEND_TRANSFER_WITH_MOONCAKE", raising=False)
    else:
        monkeypatch.setenv("ENABLE_ASCEND_TRANSFER_WITH_MOONCAKE", legacy_env)
    assert choose_ascend_build(setting, build_with(*classes)) == chosen


def test_a_build_that_contradicts_the_setting_or_the_switch_is_an_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ENABLE_ASCEND_TRANSFER_WITH_MOONCAKE", raising=False)
    with pytest.raises(StepError, match="installed Mooncake is the ascend_direct build"):
        choose_ascend_build("hccl", build_with("AscendDirectTransport"))
    monkeypatch.setenv("ENABLE_ASCEND_TRANSFER_WITH_MOONCAKE", "1")
    with pytest.raises(StepError, match="asks for the legacy host:port:npu_<id> hostname"):
        choose_ascend_build("auto", build_with("AscendDirectTransport"))
    with pytest.raises(StepError, match=r"mooncake\.ascend_build is 'legacy'"):
        choose_ascend_build("legacy", build_with())


def test_scanning_is_cached_per_path(tmp_path: Path) -> None:
    binary = tmp_path / "engine.so"
    binary.write_bytes(b"TcpTransport")
    assert scan_binary(str(binary)) is scan_binary(str(binary))


CPU_ENGINE_LOG = """\
W1130 18:34:26.420440 13907 transfer_engine_py.cpp:120] Using default malloc/free for \
protocol: ascend
I1130 18:34:26.420933 13907 transfer_engine_impl.cpp:259] Auto-discovering topology...
W1130 18:34:26.421000 13907 topology.cpp:201] No RDMA devices found, check your device installation
I1130 18:34:26.421109 13907 tcp_transport.cpp:391] TcpTransport: listen on port 15573
"""


@pytest.mark.parametrize(("log", "installed"), [
    (CPU_ENGINE_LOG, ["tcp"]),  # observed: protocol 'ascend' with the CPU wheel gets TCP
    ("I1 x.cpp:1] installTransport, type=rdma\nI1 x.cpp:2] HIP transport installed for "
     "intra-node GPU P2P", ["rdma", "hip"]),
    ("I1 x.cpp:1] install AscendDirectTransport for: 10.0.0.5:16000", ["ascend"]),
    ("I1 x.cpp:1] Using MUSA transport (forced or no HCA detected)", ["musa"]),
    ("nothing logged at INFO", []),
])
def test_installed_transports_are_read_from_mooncakes_log(log: str, installed: list[str]
                                                          ) -> None:
    assert installed_transports(log) == installed


def test_a_mismatch_says_what_to_do() -> None:
    assert transport_mismatch("tcp", ["tcp"]) is None
    assert transport_mismatch("rdma", ["rdma", "hip"]) is None
    assert transport_mismatch("tcp", []) is None  # unknown: no claim either way
    assert "MC_FORCE_TCP=1" in (transport_mismatch("tcp", ["rdma"]) or "")
    assert "mooncake-transfer-engine-npu" in (transport_mismatch("ascend", ["tcp"]) or "")


# -- the XPU allocator -------------------------------------------------------------------------

class NullPinned:
    """What torch-xpu hands back when a pinned allocation fails: a tensor at address 0."""

    def numel(self) -> int:
        return 1 << 30

    def data_ptr(self) -> int:
        return 0


def test_the_xpu_allocator_refuses_a_null_pinned_buffer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(host_pool, "_pin_memory", lambda nbytes, memory: (NullPinned(), None))
    with pytest.raises(StepError, match=r"Pinned host memory allocation of 1\.0 GiB "
                                        r"\(1073741824 bytes\) returned a null pointer"):
        host_pool.HOST_ALLOCATOR.implementation("pin_memory_xpu")(1 << 30,
                                                                  host_pool.torch_memory)


# -- releasing the engine ------------------------------------------------------------------

@pytest.mark.parametrize("in_a_cycle", [False, True])
def test_closing_releases_the_real_engine_at_once(in_a_cycle: bool) -> None:
    # The destructor closes Mooncake's sockets, so it must run at teardown, not at exit;
    # a full collection (about 0.2 s once torch is loaded) only when a cycle holds it.
    import weakref

    pytest.importorskip("mooncake.engine")
    from mooncake.engine import TransferEngine

    from initorch.steps.engine_hostname import EngineHostname
    from initorch.steps.transfer_engine import SharedTransferEngine

    engine = TransferEngine()
    alive = weakref.ref(engine)
    if in_a_cycle:
        holder: list[object] = [engine]
        holder.append(holder)  # unreachable once dropped, freed only by the collector
        del holder
    shared = SharedTransferEngine(engine, EngineHostname("127.0.0.1", "127.0.0.1"),
                                  "tcp", "", "P2PHANDSHAKE")
    del engine
    shared.close()
    assert alive() is None
    assert shared.engine is None
    shared.close()  # twice is harmless


# -- an exhausted RPC port range (issue 19) ------------------------------------------------------

EXHAUSTED = ("E1201 19:45:55.148752  8510 transfer_engine_impl.cpp:144] P2P: No valid port "
             "found for local TCP service.")  # observed: every port of the range held


def test_an_exhausted_rpc_port_range_is_said_as_such_with_mooncakes_own_line():
    from initorch.reporting.diagnosis import DiagnosisCatalog
    from initorch.steps.diagnoses import BUILTIN_DIAGNOSES
    from initorch.steps.transfer_engine import no_free_rpc_port

    error = no_free_rpc_port(EXHAUSTED, {"MC_MIN_RPC_PORT": "20600", "MC_MAX_RPC_PORT": "20602"})
    assert error is not None
    assert str(error) == (
        "the transfer engine found no free port for its RPC service: every port from "
        f"MC_MIN_RPC_PORT=20600 to MC_MAX_RPC_PORT=20602 is taken (Mooncake: {EXHAUSTED})")
    assert error.native_log == EXHAUSTED
    # Nothing generic (no RDMA device, no GID) explains it in its stead.
    assert DiagnosisCatalog(BUILTIN_DIAGNOSES).match(error) is None
    assert "MC_MIN_RPC_PORT=15000 to MC_MAX_RPC_PORT=17000" in str(no_free_rpc_port(EXHAUSTED, {}))
    assert no_free_rpc_port("E1201 rdma_context.cpp:1] no RDMA device", {}) is None


# -- SGLang's Mooncake variables (steps/mooncake_env.py) ------------------------------------

def test_sglangs_variables_beat_the_profile_and_lose_to_set(run_cli, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("MOONCAKE_PROTOCOL", "rdma")  # the cpu profile says tcp
    monkeypatch.setenv("MOONCAKE_GLOBAL_SEGMENT_SIZE", "2gb")
    code, out, err = run_cli("settings", "-p", "cpu", "--set", "mooncake.store.global_segment_mb=8",
                             "--json")
    assert code == 0, err
    rows = {row["key"]: row for row in json.loads(out)}
    assert (rows["device.mooncake_protocol"]["value"],
            rows["device.mooncake_protocol"]["origin"]) == ("rdma", "$MOONCAKE_PROTOCOL")
    assert rows["mooncake.store.global_segment_mb"]["value"] == 8  # --set wins
    assert rows["mooncake.store.global_segment_mb"]["origin"] == "<command line>"


def test_a_variable_sglang_cannot_read_is_refused_with_its_name(run_cli, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("MOONCAKE_GLOBAL_SEGMENT_SIZE", "1000")  # bytes, not whole MiB
    code, _, err = run_cli("plan", "-p", "cpu")
    assert code == 2
    assert "MOONCAKE_GLOBAL_SEGMENT_SIZE='1000' is not a whole, positive number of MiB" in err
    monkeypatch.setenv("MOONCAKE_GLOBAL_SEGMENT_SIZE", "1gb")
    monkeypatch.setenv("SGLANG_HICACHE_MOONCAKE_REUSE_TE", "maybe")
    code, _, err = run_cli("plan", "-p", "cpu")
    assert code == 2 and 'SGLANG_HICACHE_MOONCAKE_REUSE_TE="maybe"' in err


# -- mooncake.pg ---------------------------------------------------------------------------


@pytest.mark.parametrize("device", ["cpu", "cuda", "musa"])
def test_mooncake_pg_is_imported_before_any_rank_waits_for_another(device: str) -> None:
    """Mooncake 0.3.14's mooncake.pg builds itself on first import (minutes): that must
    count against the join timeout, never against the process group's."""
    from initorch import load_plan

    plan = load_plan([device, "mooncake-ep"])
    assert plan.graph.path("import_mooncake_pg", "rendezvous") is not None
    assert plan.graph.path("rendezvous", "import_mooncake_pg") is None
    assert "import_mooncake_pg" in plan.step("set_mooncake_pg_engine").step.reads
