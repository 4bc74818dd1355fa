"""Known start-up failures of LLM inference servers, as diagnosis data.

This is the device knowledge behind :mod:`initorch.reporting.diagnosis`: each entry
recognises a failure by the text the real stack prints (Mooncake glog lines,
SGLang's exceptions, ACL/HCCL and CUDA return codes, loader errors,
torch.distributed messages) and says what caused it, what to do now and which
profile constraint prevents it.  Every pattern alternative is backed by a sample
taken from upstream source, labelled with its file and version, in
``tests/support/diagnosis_corpus.py``; an alternative without one is dead and
removed.

Order matters because the first match wins: specific entries come before the
generic ones that would also match their text (``ascend-context-null`` before
``ascend-acl-call-failed``; ``mooncake-unsupported-transport`` before
``mooncake-ascend-transport-failed`` (the CPU wheel logs both when the store asks for
ascend) before ``mooncake-engine-init-failed``; ``mooncake-pg-missing-build`` before
``mooncake-not-installed``; ``mooncake-master-unreachable`` before
``mooncake-store-setup-failed``; ``master-port-in-use`` before ``port-in-use``).

Patterns are anchored on vendor wording, not on generic words ("timeout",
"connection refused"), so that an unrelated failure stays undiagnosed instead
of being explained wrongly.  Nothing here imports a vendor package.
"""

from __future__ import annotations

from initorch.plugin import Diagnosis, DiagnosisCatalog
from initorch.steps.diagnoses import ascend, host_memory, mooncake, torch_stack

__all__ = ["BUILTIN_DIAGNOSES", "register_diagnoses"]

BUILTIN_DIAGNOSES: tuple[Diagnosis, ...] = (
    ascend.CONTEXT_NULL,
    ascend.ACL_CALL_FAILED,
    mooncake.UNSUPPORTED_TRANSPORT,
    ascend.TRANSPORT_FAILED,
    host_memory.REGISTER_ON_NON_CUDA,
    host_memory.ALREADY_REGISTERED,
    host_memory.REGISTER_FAILED,
    host_memory.PINNED_NULL,
    host_memory.BUDGET_EXCEEDED,
    host_memory.MOONCAKE_ALLOC_FAILED,
    ascend.CANN_NOT_LOADED,
    mooncake.LIBIBVERBS_MISSING,
    mooncake.CUDA_BUILD_WITHOUT_DRIVER,
    mooncake.CUDA_RUNTIME_MISSING,
    torch_stack.DEVICE_BACKEND_NOT_LOADED,
    mooncake.PG_MISSING_BUILD,
    mooncake.PG_JIT_FAILED,
    mooncake.NOT_INSTALLED,
    torch_stack.NUMPY_MISSING,
    torch_stack.BACKEND_NOT_REGISTERED,
    mooncake.TRANSPORT_MISMATCH,
    mooncake.ENGINE_INIT_DEADLINE,
    mooncake.ENGINE_INIT_FAILED,
    mooncake.IPV6_PEER_UNRESOLVED,
    mooncake.MASTER_UNREACHABLE,
    mooncake.STORE_SETUP_FAILED,
    mooncake.STORE_REGISTER_FAILED,
    mooncake.TRANSFER_SUBMIT_FAILED,
    host_memory.LAYOUT_UNSUPPORTED,
    torch_stack.MASTER_PORT_IN_USE,
    torch_stack.PORT_IN_USE,
    torch_stack.RENDEZVOUS_CONNECT_FAILED,
    torch_stack.PROCESS_GROUP_TIMEOUT,
    torch_stack.MEMORY_UNBALANCED,
)


def register_diagnoses(catalog: DiagnosisCatalog) -> None:
    """Add the built-in entries to ``catalog``, after anything a caller placed first;
    their patterns are compiled at their first match (``checked``: initorch's tests
    validate every one, ``tests/unit/reporting/test_diagnosis.py``)."""
    catalog.extend(BUILTIN_DIAGNOSES, checked=True)
