"""Tests for the diagnosis engine (initorch.reporting.diagnosis) and its built-in entries.

Every built-in entry is exercised with the exception the real stack raises, in
the form it prints: loader errors as ImportError/OSError, torch.distributed
errors as classes named like torch's (defined here, torch is not imported),
and StepError carrying Mooncake's glog output in ``native_log``.
"""

from __future__ import annotations

import errno
import json
import os
import re
import socket
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from initorch.errors import InitorchError, StepError
from initorch.reporting.diagnosis import (
    Diagnosis,
    DiagnosisCatalog,
    DiagnosisDefinitionError,
    Finding,
    exception_chain,
    failure_text,
    vendor_code_of,
)
from initorch.steps.diagnoses import BUILTIN_DIAGNOSES, register_diagnoses

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

# Attribute access on a value typed Any, so that the real AttributeError text is produced.
NONE: Any = None


# --- stand-ins for vendor exception classes, matched by name --------------------------


class DistError(RuntimeError):
    """Named like torch.distributed.DistError."""


class DistStoreError(DistError):
    """Named like torch.distributed.DistStoreError."""


class DistNetworkError(DistError):
    """Named like torch.distributed.DistNetworkError."""


class RendezvousError(Exception):
    """Named like torch.distributed.elastic.rendezvous.api.RendezvousError."""


class RendezvousConnectionError(RendezvousError):
    """Named like torch.distributed.elastic.rendezvous.api.RendezvousConnectionError."""


class BrokenStr(Exception):
    def __str__(self) -> str:
        raise RuntimeError("__str__ is broken")


# --- helpers --------------------------------------------------------------------------


def caught(action: Callable[[], object]) -> BaseException:
    """Run ``action`` and return what it raised, with the chain Python built."""
    try:
        action()
    except BaseException as exc:  # collecting whatever was raised is the point
        return exc
    raise AssertionError("expected an exception")


def raise_(exc: BaseException) -> None:
    raise exc


def chained(outer: BaseException, inner: BaseException) -> BaseException:
    """``raise outer from inner``, really raised."""

    def action() -> None:
        try:
            raise inner
        except BaseException as error:
            raise outer from error

    return caught(action)


def implicit(outer: BaseException, inner: BaseException) -> BaseException:
    """``raise outer`` while handling ``inner`` (implicit ``__context__``)."""

    def action() -> None:
        try:
            raise inner
        except BaseException:
            raise outer  # noqa: B904 - the implicit context is what is under test

    return caught(action)


def book() -> DiagnosisCatalog:
    return DiagnosisCatalog(BUILTIN_DIAGNOSES)


def entry(id: str = "sample", pattern: str = "boom", **fields: object) -> Diagnosis:
    texts: dict[str, object] = {
        "title": "Sample failure",
        "cause": "Something sampled went wrong.",
        "remedy": "Do the sample thing.",
        "prevention": "Keep the sample setting.",
    }
    texts.update(fields)
    return Diagnosis(id=id, pattern=pattern, **texts)  # type: ignore[arg-type]


def glog(level: str, source: str, message: str) -> str:
    """One glog line as Mooncake prints it (``Lmmdd hh:mm:ss.uuuuuu tid file:line] msg``)."""
    return f"{level}1130 04:51:12.101877 48213 {source}] {message}"


def address_in_use() -> BaseException:
    """A real EADDRINUSE: bind a second socket to a port that is already listening."""
    with socket.socket() as first, socket.socket() as second:
        first.bind(("127.0.0.1", 0))
        first.listen()
        return caught(lambda: second.bind(first.getsockname()))


ASCEND_GLOG = "\n".join(
    [
        glog(
            "I",
            "transfer_engine_impl.cpp:104",
            "Transfer Engine parseHostNameWithPortAscend. server_name: 10.0.0.5 "
            "port: 12001 devicePhyId: 2",
        ),
        glog(
            "I",
            "transfer_engine_impl.cpp:171",
            "Transfer Engine RPC using P2P handshake, listening on 10.0.0.5:16789",
        ),
        glog("E", "hccl_transport.cpp:297", "Call aclrtGetDevice failed, ret: 107002"),
        glog("E", "transfer_engine_impl.cpp:215", "Failed to install Ascend transport"),
    ]
)

RDMA_GLOG = "\n".join(
    [
        glog(
            "E",
            "rdma_context.cpp:1132",
            "GID is NULL, please check your GID index by specifying MC_GID_INDEX",
        ),
        glog("E", "rdma_context.cpp:200", "Failed to open device mlx5_0 on port 1 with GID 3"),
        glog("E", "transfer_engine_impl.cpp:297", "Failed to install transport, type=rdma"),
    ]
)

NO_SUCH_FILE = "cannot open shared object file: No such file or directory"

# (exception factory, expected diagnosis id, expected vendor code)
SAMPLES = [
    pytest.param(
        lambda: StepError(
            "TransferEngine.initialize('10.0.0.5:12001:npu_2', 'P2PHANDSHAKE', 'ascend', '') "
            "returned -1",
            vendor_code=-1,
            native_log=ASCEND_GLOG,
        ),
        "ascend-context-null",
        "107002",
        id="ascend-glog-in-native-log",
    ),
    pytest.param(
        lambda: RuntimeError("Call aclrtGetDevice failed, ret: 107002"),
        "ascend-context-null",
        "107002",
        id="ascend-runtime-error",
    ),
    pytest.param(
        lambda: chained(
            RuntimeError("Mooncake Transfer Engine initialization failed."),
            StepError(
                "ascend transport could not allocate a local segment",
                native_log=glog(
                    "W",
                    "adapter_hccl.cc:49",
                    "[Get][Device]errNo[0x0000000005000004] rtGet device fail, please make "
                    "sure that device is set. return[107002], para:deviceLogicId[0]",
                ),
            ),
        ),
        "ascend-context-null",
        "107002",
        id="ascend-hccl-warning-behind-runtime-error",
    ),
    pytest.param(
        lambda: caught(lambda: NONE.cudaHostRegister),
        "cuda-host-register-on-non-cuda",
        None,
        id="nonetype-cudahostregister",
    ),
    pytest.param(
        lambda: chained(
            StepError("alloc_host_mem_pool failed on musa:0"),
            caught(lambda: NONE.cudaHostRegister),
        ),
        "cuda-host-register-on-non-cuda",
        None,
        id="nonetype-cudahostregister-wrapped",
    ),
    pytest.param(
        lambda: StepError(
            "cudaHostRegister(ptr=0x7f3a2c000000, nbytes=67108864) failed with error 712",
            vendor_code=712,
        ),
        "cuda-host-register-already-registered",
        "712",
        id="cuda-712",
    ),
    pytest.param(
        lambda: StepError(
            "cudaHostRegister(ptr=0x7f3a2c000000, nbytes=712) failed with error 2",
            vendor_code=2,
        ),
        "cuda-host-register-failed",
        "2",
        id="cuda-2-with-712-bytes",
    ),
    pytest.param(
        lambda: StepError(
            "cudaHostRegister(ptr=0x7f3a2c000000, nbytes=4096) failed with error 801"
        ),
        "cuda-host-register-failed",
        "801",
        id="cuda-801",
    ),
    pytest.param(
        lambda: chained(
            StepError("import_backend: cannot import torch_npu"),
            ImportError(f"libhccl.so: {NO_SUCH_FILE}"),
        ),
        "ascend-cann-not-loaded",
        None,
        id="libhccl-import-error",
    ),
    pytest.param(
        lambda: OSError(f"libascendcl.so: {NO_SUCH_FILE}"),
        "ascend-cann-not-loaded",
        None,
        id="libascendcl-oserror",
    ),
    pytest.param(
        lambda: implicit(
            StepError("init_shared_mooncake_transfer_engine: cannot import mooncake.engine"),
            ImportError(f"libibverbs.so.1: {NO_SUCH_FILE}"),
        ),
        "libibverbs-missing",
        None,
        id="libibverbs",
    ),
    pytest.param(
        lambda: ImportError(f"libnuma.so.1: {NO_SUCH_FILE}"),
        "libibverbs-missing",
        None,
        id="libnuma",
    ),
    pytest.param(
        lambda: ImportError(f"libcuda.so.1: {NO_SUCH_FILE}"),
        "mooncake-cuda-build-without-driver",
        None,
        id="libcuda",
    ),
    pytest.param(
        lambda: RuntimeError(
            "Expected one of cpu, cuda, ipu, xpu, mkldnn, opengl, opencl, ideep, hip, ve, "
            "fpga, maia, xla, lazy, vulkan, mps, meta, hpu, mtia, privateuseone device type "
            "at start of device string: npu"
        ),
        "torch-device-backend-not-loaded",
        None,
        id="torch-device-npu",
    ),
    pytest.param(
        lambda: ModuleNotFoundError("No module named 'torch_musa'", name="torch_musa"),
        "torch-device-backend-not-loaded",
        None,
        id="no-torch-musa",
    ),
    pytest.param(
        lambda: AttributeError("module 'torch' has no attribute 'npu'"),
        "torch-device-backend-not-loaded",
        None,
        id="torch-has-no-npu",
    ),
    pytest.param(
        lambda: ModuleNotFoundError("No module named 'mooncake'", name="mooncake"),
        "mooncake-not-installed",
        None,
        id="no-mooncake",
    ),
    pytest.param(
        lambda: ModuleNotFoundError("No module named 'mooncake.engine'", name="mooncake.engine"),
        "mooncake-not-installed",
        None,
        id="no-mooncake-engine",
    ),
    pytest.param(
        # torch 2.13 torch/csrc/utils/tensor_numpy.cpp, reached from all_gather_object
        lambda: RuntimeError("Numpy is not available"),
        "numpy-missing",
        None,
        id="numpy-not-available",
    ),
    pytest.param(
        lambda: StepError(
            "TransferEngine.initialize('127.0.0.1', 'P2PHANDSHAKE', 'rdma', 'mlx5_0') returned -1",
            native_log=RDMA_GLOG,
        ),
        "mooncake-engine-init-failed",
        "-1",
        id="engine-init-rdma",
    ),
    pytest.param(
        lambda: RuntimeError("Mooncake Transfer Engine initialization failed."),
        "mooncake-engine-init-failed",
        None,
        id="engine-init-sglang",
    ),
    pytest.param(
        lambda: DistNetworkError(
            "The server socket has failed to listen on any local network address. port: "
            "29500, useIpv6: false, code: -98, name: EADDRINUSE, message: address already "
            "in use"
        ),
        "master-port-in-use",
        None,
        id="master-port-libuv",
    ),
    pytest.param(
        lambda: RuntimeError(
            "The server socket has failed to listen on any local network address. The "
            "server socket has failed to bind to [::]:29500 (errno: 98 - Address already in "
            "use). The server socket has failed to bind to 0.0.0.0:29500 (errno: 98 - "
            "Address already in use)."
        ),
        "master-port-in-use",
        None,
        id="master-port-legacy",
    ),
    pytest.param(address_in_use, "port-in-use", None, id="real-eaddrinuse"),
    pytest.param(
        lambda: DistNetworkError(
            "The client socket has failed to connect to any network address of (127.0.0.1, "
            "29500). The client socket has failed to connect to [localhost]:29500 (errno: 111 "
            "- Connection refused)."
        ),
        "rendezvous-connect-failed",
        "111",
        id="rendezvous-refused",
    ),
    pytest.param(
        lambda: chained(
            RendezvousConnectionError(
                "The connection to the C10d store has failed. See inner exception for details."
            ),
            DistNetworkError(
                "The client socket has failed to connect to [node0]:29400 (errno: 113 - No "
                "route to host)."
            ),
        ),
        "rendezvous-connect-failed",
        None,
        id="rendezvous-elastic",
    ),
    pytest.param(
        lambda: chained(
            StepError("cannot import torch_npu: libhccl.so: " + NO_SUCH_FILE),
            ImportError(f"libhccl.so: {NO_SUCH_FILE}"),
        ),
        "ascend-cann-not-loaded",
        None,
        id="import-backend-step-torch-npu",
    ),
    pytest.param(
        lambda: chained(
            StepError("cannot import mooncake.engine: No module named 'mooncake'"),
            ModuleNotFoundError("No module named 'mooncake'", name="mooncake"),
        ),
        "mooncake-not-installed",
        None,
        id="transfer-engine-step-import",
    ),
    pytest.param(
        lambda: StepError(
            "host pool layout 'layer_frist' is not supported by the Mooncake storage backend"
        ),
        "host-pool-layout-unsupported",
        None,
        id="host-pool-step-layout",
    ),
    pytest.param(
        # steps/rendezvous.py wraps torch's TCPStore error in its own StepError.
        lambda: chained(
            StepError(
                "rendezvous tcp://127.0.0.1:29500: reaching the job's store failed: The client "
                "socket has failed to connect to any network address of (127.0.0.1, 29500)."
            ),
            RuntimeError(
                "The client socket has failed to connect to any network address of "
                "(127.0.0.1, 29500)."
            ),
        ),
        "rendezvous-connect-failed",
        None,
        id="distributed-step-refused",
    ),
    pytest.param(
        lambda: DistStoreError(
            "Timed out after 901 seconds waiting for clients. 1/2 clients joined."
        ),
        "process-group-timeout",
        None,
        id="store-clients-joined",
    ),
    pytest.param(
        lambda: DistStoreError("wait timeout after 300000ms, keys: /default_pg/0//cpu//0"),
        "process-group-timeout",
        None,
        id="store-wait-timeout",
    ),
    pytest.param(
        lambda: DistNetworkError(
            "The client socket has timed out after 600000ms while trying to connect to "
            "(10.0.0.1, 29500)."
        ),
        "process-group-timeout",
        None,
        id="client-connect-timeout",
    ),
    pytest.param(
        lambda: RuntimeError(
            "Timed out initializing process group in store based barrier on rank: 1, for "
            "key: store_based_barrier_key:1 (world_size=2, worker_count=1, timeout=0:30:00)"
        ),
        "process-group-timeout",
        None,
        id="store-based-barrier",
    ),
    pytest.param(
        lambda: RuntimeError("Socket Timeout"),
        "process-group-timeout",
        None,
        id="legacy-socket-timeout",
    ),
    pytest.param(
        lambda: StepError(
            "The memory capacity is unbalanced. Some GPUs may be occupied by other processes. "
            "Available memory per rank (GiB, host): rank 0 11.00, rank 1 2.75; rank 1 has 25% "
            "of rank 0's, below memory.balance_threshold 0.9"),
        "tp-memory-unbalanced",
        None,
        id="memory-baseline-step",
    ),
]

# (specific, generic): the generic entry also matches the specific one's message, so
# the specific one must be registered first.  Every other pair must not overlap.
ALLOWED_OVERLAPS = {
    ("ascend-context-null", "mooncake-engine-init-failed"),
    ("ascend-context-null", "mooncake-ascend-transport-failed"),
    ("cuda-host-register-already-registered", "cuda-host-register-failed"),
    ("master-port-in-use", "port-in-use"),
}

UNKNOWN = [
    pytest.param(lambda: ValueError("invalid literal for int() with base 10: 'x'"), id="value"),
    pytest.param(lambda: RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"), id="oom"),
    pytest.param(
        lambda: ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused"),
        id="plain-connection-refused",
    ),
    pytest.param(lambda: RuntimeError("socket timeout"), id="lower-case-socket-timeout"),
    pytest.param(lambda: TimeoutError("timed out"), id="timeout"),
    pytest.param(
        lambda: StepError(
            "weights not found",
            native_log=glog("W", "rdma_transport.cpp:56", "No RDMA devices found"),
        ),
        id="harmless-glog",
    ),
    pytest.param(lambda: KeyError("MASTER_ADDR"), id="key"),
    pytest.param(
        lambda: ImportError("cannot import name 'TransferEngine' from 'mooncake'"),
        id="import-name",
    ),
    pytest.param(lambda: caught(lambda: NONE.shape), id="nonetype-other-attribute"),
    pytest.param(lambda: OSError(f"libfoo.so: {NO_SUCH_FILE}"), id="other-library"),
    pytest.param(
        lambda: StepError("cudaHostRegister(ptr=0x7f3a2c000000, nbytes=4096) returned 0"),
        id="host-register-success-text",
    ),
    pytest.param(BrokenStr, id="broken-str"),
]


# --- built-in entries -----------------------------------------------------------------


@pytest.mark.parametrize(("make", "expected", "code"), SAMPLES)
def test_builtin_entry_matches_real_message(make, expected, code):
    finding = book().match(make())
    assert finding is not None, "no diagnosis matched"
    assert finding.diagnosis.id == expected
    assert finding.vendor_code == code


@pytest.mark.parametrize(("make", "expected", "code"), SAMPLES)
def test_entries_do_not_cross_match(make, expected, code):
    exc = make()
    order = [diagnosis.id for diagnosis in BUILTIN_DIAGNOSES]
    for diagnosis in BUILTIN_DIAGNOSES:
        if diagnosis.id == expected:
            continue
        if DiagnosisCatalog([diagnosis]).match(exc) is None:
            continue
        assert (expected, diagnosis.id) in ALLOWED_OVERLAPS, (
            f"{diagnosis.id} also matches the {expected} sample"
        )
        assert order.index(expected) < order.index(diagnosis.id)


def test_allowed_overlaps_name_real_entries():
    ids = {diagnosis.id for diagnosis in BUILTIN_DIAGNOSES}
    assert {name for pair in ALLOWED_OVERLAPS for name in pair} <= ids


@pytest.mark.parametrize("make", UNKNOWN)
def test_unknown_failure_is_not_diagnosed(make):
    assert book().match(make()) is None


@pytest.mark.parametrize("diagnosis", BUILTIN_DIAGNOSES, ids=lambda d: d.id)
def test_builtin_entry_reads_well(diagnosis):
    for text in (diagnosis.title, diagnosis.cause, diagnosis.remedy, diagnosis.prevention):
        assert text.strip() == text and len(text) > 20
    summary = Finding(diagnosis, None, "x").summary()
    assert "\n" not in summary
    assert ".." not in summary


@pytest.mark.parametrize("diagnosis", BUILTIN_DIAGNOSES, ids=lambda d: d.id)
def test_builtin_patterns_bound_their_gaps(diagnosis):
    # "X[^\n]*?Y" is quadratic on a long line full of X; a bounded gap keeps matching linear.
    assert not re.search(r"\[\^\\n\][*+]|\.[*+]|\[\\w ,\][*+]", diagnosis.pattern)


def test_huge_native_log_keeps_its_tail():
    log = "I1130 filler line\n" * 100_000 + "E1130 x.cpp:1] Call aclrtGetDevice failed, ret: 107002"
    exc = StepError("engine init failed", native_log=log)
    text = failure_text(exc)
    assert "earlier characters of native log omitted" in text
    assert len(text) < len(log)
    finding = book().match(exc)
    assert finding is not None and finding.vendor_code == "107002"


def test_register_diagnoses_adds_every_builtin_in_order():
    target = DiagnosisCatalog()
    register_diagnoses(target)
    assert list(target) == list(BUILTIN_DIAGNOSES)


def test_checked_entries_compile_their_pattern_at_their_first_match(monkeypatch):
    compiled: list[str] = []
    real = re.compile

    def counting(pattern, flags=0):
        compiled.append(pattern)
        return real(pattern, flags)

    failure = StepError("engine init failed",
                        native_log="E1130 x.cpp:1] Call aclrtGetDevice failed, ret: 107002")
    expected = book().match(failure)  # every built-in validated and compiled at once
    monkeypatch.setattr(re, "compile", counting)
    target = DiagnosisCatalog()
    register_diagnoses(target)  # checked: validated, nothing compiled
    assert compiled == []
    assert target.match(failure) == expected and expected is not None
    tried = [d.pattern for d in BUILTIN_DIAGNOSES][:len(compiled)]
    assert compiled == tried  # the patterns tried up to the match, once each
    target.match(failure)
    assert compiled == tried


def test_a_checked_entry_is_validated_as_any_other_but_for_its_pattern():
    target = DiagnosisCatalog()
    with pytest.raises(DiagnosisDefinitionError, match="invalid id"):
        target.extend([entry(id="Not An Id")], checked=True)
    target.extend([entry(pattern="(unbalanced")], checked=True)  # the caller's promise
    assert len(target) == 1


def test_importing_the_knowledge_base_imports_no_vendor_package():
    code = (
        "import sys, steps.diagnoses, initorch.reporting.diagnosis; "
        "print(sorted(n for n in ('torch', 'torch_npu', 'torch_musa', 'mooncake') "
        "if n in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": ROOT},
    )
    assert result.stdout.strip() == "[]"


# --- findings ---------------------------------------------------------------------------


def test_summary_is_one_line_with_id_title_cause_remedy_and_code():
    finding = book().match(SAMPLES[0].values[0]())
    assert finding is not None
    summary = finding.summary()
    assert summary.startswith(
        "diagnosis ascend-context-null: No Ascend device context on the thread"
    )
    assert "(vendor code 107002)" in summary
    assert "Cause: Mooncake's ascend transports call aclrtGetDevice" in summary
    assert "Remedy: Call torch.npu.set_device" in summary
    assert "\n" not in summary


def test_as_dict_is_json_ready():
    finding = book().match(SAMPLES[0].values[0]())
    assert finding is not None
    data = json.loads(json.dumps(finding.as_dict()))
    assert data["id"] == "ascend-context-null"
    assert data["vendor_code"] == "107002"
    assert data["matched"] == "aclrtGetDevice failed, ret: 107002"
    assert set(data) == {"id", "title", "cause", "remedy", "prevention", "vendor_code", "matched"}


def test_summary_collapses_multiline_texts():
    finding = Finding(entry(cause="First line.\n   Second line."), None, "boom")
    assert "Cause: First line. Second line. Remedy:" in finding.summary()


# --- chains and text ------------------------------------------------------------------


def test_failure_text_walks_the_chain_with_native_logs():
    exc = chained(
        StepError("engine init failed", native_log="E1130 x.cpp:1] bad\n"),
        ImportError(f"libibverbs.so.1: {NO_SUCH_FILE}"),
    )
    assert failure_text(exc) == (
        "StepError: engine init failed\nE1130 x.cpp:1] bad\n"
        f"ImportError: libibverbs.so.1: {NO_SUCH_FILE}"
    )


def test_raise_from_none_hides_the_context():
    def action() -> None:
        try:
            raise ImportError(f"libibverbs.so.1: {NO_SUCH_FILE}")
        except ImportError:
            raise StepError("engine init failed") from None

    exc = caught(action)
    assert book().match(exc) is None
    assert failure_text(exc) == "StepError: engine init failed"


def test_cause_wins_over_context_like_a_traceback():
    exc = implicit(
        chained(StepError("outer"), ImportError(f"libcuda.so.1: {NO_SUCH_FILE}")),
        ImportError(f"libibverbs.so.1: {NO_SUCH_FILE}"),
    )
    finding = book().match(exc)
    assert finding is not None
    assert finding.diagnosis.id == "mooncake-cuda-build-without-driver"


def test_chain_loops_are_cut():
    first = RuntimeError("first")
    second = ImportError(f"libcuda.so.1: {NO_SUCH_FILE}")
    first.__context__ = second
    second.__context__ = first
    assert exception_chain(first) == (first, second)
    assert failure_text(first).count("RuntimeError: first") == 1
    finding = book().match(first)
    assert finding is not None and finding.diagnosis.id == "mooncake-cuda-build-without-driver"


def test_self_cause_is_cut():
    exc = RuntimeError("alone")
    exc.__cause__ = exc
    assert exception_chain(exc) == (exc,)
    assert book().match(exc) is None


@pytest.mark.skipif(sys.version_info < (3, 11), reason="exception groups need 3.11")
def test_exception_group_members_are_searched():
    group = BaseExceptionGroup(  # noqa: F821 - builtin from 3.11
        "parallel steps failed",
        [ValueError("unrelated"), ImportError(f"libibverbs.so.1: {NO_SUCH_FILE}")],
    )
    finding = book().match(group)
    assert finding is not None and finding.diagnosis.id == "libibverbs-missing"


def test_unprintable_exception_does_not_break_matching():
    exc = chained(
        StepError("x", native_log=b"E1130 Call aclrtGetDevice failed, ret: 107002"), BrokenStr()
    )
    assert "<unprintable BrokenStr object>" in failure_text(exc)
    finding = book().match(exc)
    assert finding is not None and finding.vendor_code == "107002"


# --- vendor codes -----------------------------------------------------------------------


def test_code_group_wins_over_attribute():
    finding = book().match(SAMPLES[0].values[0]())  # vendor_code=-1, glog says 107002
    assert finding is not None and finding.vendor_code == "107002"


def test_vendor_code_attribute_found_anywhere_in_chain():
    exc = chained(
        RuntimeError("Mooncake Transfer Engine initialization failed."),
        StepError("initialize returned -1", vendor_code=-1),
    )
    assert vendor_code_of(exc) == "-1"
    finding = book().match(exc)
    assert finding is not None
    assert finding.diagnosis.id == "mooncake-engine-init-failed"
    assert finding.vendor_code == "-1"


def test_no_vendor_code_anywhere():
    assert vendor_code_of(ValueError("x")) is None
    assert vendor_code_of(StepError("x", vendor_code="")) is None
    assert vendor_code_of(StepError("x", vendor_code=" \n ")) is None


def test_vendor_code_is_one_line():
    assert vendor_code_of(StepError("x", vendor_code="71\n2 ")) == "71 2"


# --- matching rules -------------------------------------------------------------------


def test_exception_types_match_any_class_in_the_mro():
    only_os = DiagnosisCatalog([entry(pattern="refused", exception_types=("OSError",))])
    assert only_os.match(ConnectionRefusedError("refused")) is not None
    assert only_os.match(ValueError("refused")) is None


def test_exception_types_apply_to_the_exception_that_carries_the_text():
    only_import = DiagnosisCatalog([entry(pattern="libx", exception_types=("ImportError",))])
    assert only_import.match(chained(StepError("wrapper"), ImportError("libx"))) is not None
    assert only_import.match(chained(StepError("libx"), ImportError("other"))) is None


def test_exception_types_match_vendor_classes_by_name():
    named = DiagnosisCatalog([entry(pattern="timed out", exception_types=("DistStoreError",))])
    assert named.match(DistStoreError("Timed out after 5 seconds")) is not None
    assert named.match(DistNetworkError("Timed out after 5 seconds")) is None


def test_ignore_case_false_is_case_sensitive():
    strict = DiagnosisCatalog([entry(pattern="Boom", ignore_case=False)])
    assert strict.match(RuntimeError("Boom")) is not None
    assert strict.match(RuntimeError("boom")) is None
    default = DiagnosisCatalog([entry(pattern="Boom")])
    assert default.match(RuntimeError("BOOM")) is not None


def test_first_registered_entry_wins():
    generic = entry("generic", pattern="failed")
    specific = entry("specific", pattern="init failed")
    finding = DiagnosisCatalog([generic, specific]).match(RuntimeError("init failed"))
    assert finding is not None and finding.diagnosis.id == "generic"
    finding = DiagnosisCatalog([specific, generic]).match(RuntimeError("init failed"))
    assert finding is not None and finding.diagnosis.id == "specific"


# --- definitions ------------------------------------------------------------------------


def test_duplicate_id_is_rejected_and_names_both_places():
    target = DiagnosisCatalog([entry("dup")])
    with pytest.raises(DiagnosisDefinitionError) as info:
        target.add(entry("dup", pattern="other"))
    assert info.value.ids == ("dup",)
    assert "diagnosis 'dup': registered twice: first at " in str(info.value)
    assert f"{os.path.basename(__file__)}:" in str(info.value)
    assert isinstance(info.value, InitorchError)


def test_duplicate_within_one_batch_is_rejected():
    with pytest.raises(DiagnosisDefinitionError, match="registered twice"):
        DiagnosisCatalog([entry("twin"), entry("twin")])


def test_builtin_id_cannot_be_registered_again():
    with pytest.raises(DiagnosisDefinitionError, match="ascend-context-null"):
        book().add(entry("ascend-context-null"))


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"pattern": "(unclosed"}, "pattern does not compile"),
        ({"pattern": ""}, "empty pattern"),
        ({"pattern": "x*"}, "matches the empty string"),
        ({"pattern": "a|"}, "matches the empty string"),
        ({"id": "Not_Kebab"}, "invalid id"),
        ({"id": "-lead"}, "invalid id"),
        ({"title": "two\nlines"}, "title spans several lines"),
        ({"remedy": "  "}, "empty remedy"),
        ({"prevention": ""}, "empty prevention"),
        ({"exception_types": "ImportError"}, "exception_types must be a tuple"),
        ({"exception_types": ("torch.DistError",)}, "exception_types must be a tuple"),
    ],
)
def test_invalid_entry_is_rejected(fields, message):
    with pytest.raises(DiagnosisDefinitionError, match=re.escape(message)):
        DiagnosisCatalog([entry(**fields)])


def test_every_problem_is_reported_at_once_and_nothing_is_added():
    target = DiagnosisCatalog([entry("kept")])
    with pytest.raises(DiagnosisDefinitionError) as info:
        target.extend([entry("fine"), entry("bad-regex", pattern="("), entry("kept")])
    assert info.value.ids == ("bad-regex", "kept")
    assert len(info.value.problems) == 2
    assert [d.id for d in target] == ["kept"]


def test_non_diagnosis_is_rejected():
    with pytest.raises(DiagnosisDefinitionError, match="not a Diagnosis"):
        DiagnosisCatalog(["boom"])  # type: ignore[list-item]


def test_insert_before_unknown_id_is_rejected():
    with pytest.raises(DiagnosisDefinitionError, match="unknown diagnosis 'nope'"):
        book().add(entry(), before="nope")


# --- plugins ----------------------------------------------------------------------------

GID_NULL = Diagnosis(
    id="mooncake-rdma-gid-null",
    title="Mooncake found no GID on the RDMA device",
    cause="The HCA port has no GID at the index Mooncake uses (RoCE without an IP).",
    remedy="Set MC_GID_INDEX to a populated index (show_gids) or configure the RoCE IP.",
    prevention="Pin MC_GID_INDEX in the site overlay for RoCE clusters.",
    pattern=r"GID is NULL",
)

HCCL_TIMEOUT = Diagnosis(
    id="hccl-connect-timeout",
    title="HCCL could not connect the ranks of a communicator in time",
    cause="Another rank did not reach HCCL communicator init within HCCL_CONNECT_TIMEOUT.",
    remedy="Check that every rank started and raise HCCL_CONNECT_TIMEOUT if start-up is slow.",
    prevention="Keep init_torch_distributed before slow steps on npu.",
    pattern=r"\bEI0006\b",
    exception_types=("RuntimeError",),
)


def plugin_register(target: DiagnosisCatalog) -> None:
    """What a third-party plugin does: refine one built-in, add one new entry."""
    target.add(GID_NULL, before="mooncake-engine-init-failed")
    target.add(HCCL_TIMEOUT)


def test_plugin_entries_refine_and_extend_the_builtins():
    target = book()
    plugin_register(target)
    assert len(target) == len(BUILTIN_DIAGNOSES) + 2
    assert "mooncake-rdma-gid-null" in target
    rdma = StepError("TransferEngine.initialize(...) returned -1", native_log=RDMA_GLOG)
    finding = target.match(rdma)
    assert finding is not None and finding.diagnosis.id == "mooncake-rdma-gid-null"
    hccl = RuntimeError(
        "EI0006: Getting socket times out. Reason: 1. The remote does not "
        "initiate a connect request."
    )
    finding = target.match(hccl)
    assert finding is not None and finding.diagnosis.id == "hccl-connect-timeout"
    # Without the plugin the RDMA failure still gets the generic entry.
    finding = book().match(rdma)
    assert finding is not None and finding.diagnosis.id == "mooncake-engine-init-failed"


# --- properties ---------------------------------------------------------------------------

SAMPLE_TEXTS = [str(param.values[0]()) for param in SAMPLES] + [
    ASCEND_GLOG,
    RDMA_GLOG,
    "Call aclrtGetDevice failed, ret: 107002",
]
EXCEPTION_TYPES = [
    ValueError,
    RuntimeError,
    OSError,
    ImportError,
    AttributeError,
    DistStoreError,
    DistNetworkError,
    StepError,
    BrokenStr,
]
messages = st.one_of(st.text(max_size=200), st.sampled_from(SAMPLE_TEXTS))


@st.composite
def exception_chains(draw: st.DrawFn) -> BaseException:
    count = draw(st.integers(1, 6))
    items: list[BaseException] = []
    for _ in range(count):
        kind = draw(st.sampled_from(EXCEPTION_TYPES))
        if kind is StepError:
            items.append(
                StepError(
                    draw(messages),
                    native_log=draw(messages),
                    vendor_code=draw(st.none() | st.integers() | st.text()),
                )
            )
        else:
            items.append(kind(draw(messages)))
    for item in items:  # links may point anywhere, loops included
        item.__cause__ = draw(st.none() | st.sampled_from(items))
        item.__context__ = draw(st.none() | st.sampled_from(items))
        item.__suppress_context__ = draw(st.booleans())
    return items[0]


@settings(max_examples=300, deadline=None)
@given(exception_chains())
def test_matching_never_raises_on_arbitrary_chains(exc):
    target = book()
    text = failure_text(exc)
    finding = target.match(exc)
    vendor_code_of(exc)
    assert len(exception_chain(exc)) <= 6
    if finding is not None:
        assert finding.diagnosis in list(target)
        assert finding.matched in text
        assert "\n" not in finding.summary()


@settings(max_examples=200, deadline=None)
@given(
    tokens=st.lists(
        st.from_regex(r"[a-z]{3,6}", fullmatch=True), min_size=1, max_size=6, unique=True
    ),
    message=st.text(alphabet="abcdefghijklmnopqrstuvwxyz ", max_size=40),
)
def test_first_match_wins_in_registration_order(tokens, message):
    entries = [entry(f"e{index}", pattern=re.escape(token)) for index, token in enumerate(tokens)]
    exc = RuntimeError(message)
    alone = [DiagnosisCatalog([item]).match(exc) is not None for item in entries]
    finding = DiagnosisCatalog(entries).match(exc)
    if not any(alone):
        assert finding is None
    else:
        assert finding is not None
        assert finding.diagnosis is entries[alone.index(True)]


@settings(max_examples=200, deadline=None)
@given(code=st.integers(1, 10**6), ptr=st.integers(1, 2**48), nbytes=st.integers(0, 2**40))
def test_host_register_code_is_extracted(code, ptr, nbytes):
    exc = StepError(f"cudaHostRegister(ptr={ptr:#x}, nbytes={nbytes}) failed with error {code}")
    finding = book().match(exc)
    assert finding is not None
    assert finding.vendor_code == str(code)
    expected = (
        "cuda-host-register-already-registered" if code == 712 else ("cuda-host-register-failed")
    )
    assert finding.diagnosis.id == expected
