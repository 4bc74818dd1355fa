"""Host-pool layout rewrites against SGLang 0.5.23's own ``hicache_hook`` functions.

SGLang's ``resolve_layout_io_compatibility`` and ``resolve_storage_layout_compatibility``
run, in ``handle_hicache``'s order (``hicache_hook.py:81-86``), on a bare argument
object per combination; initorch's :func:`resolve_layout` gets the same inputs.  One
difference is deliberate and asserted: ``layer_first`` + Mooncake + ``kernel_ascend``
on an MHA model, which SGLang keeps and its store then rejects on the first page
(``mooncake_store.py:1320``), is refused by initorch at once.
"""

from __future__ import annotations

import itertools

import pytest

from initorch.errors import StepError
from initorch.steps.kv_layout import IO_BACKENDS, LAYOUTS, resolve_layout
from tests.sglang.oracle import ask

pytestmark = pytest.mark.sglang

HOOK_SCRIPT = r'''
import json, sys, types
from sglang.srt.arg_groups import hicache_hook
from sglang.srt.arg_groups.model_override_base import resolving_view
answers = []
for layout, io, backend in json.loads(sys.argv[1]):
    args = types.SimpleNamespace(hicache_mem_layout=layout, hicache_io_backend=io,
                                 hicache_storage_backend=backend, dcp_size=1,
                                 enable_unified_memory=False)
    hicache_hook.resolve_layout_io_compatibility(args)
    hicache_hook.resolve_storage_layout_compatibility(args)
    view = resolving_view(args)
    answers.append([view.hicache_mem_layout, view.hicache_io_backend])
print(json.dumps(answers))
'''

CASES = list(itertools.product(LAYOUTS, IO_BACKENDS, ("mooncake", "none")))


def test_layouts_and_io_backends_resolve_as_sglang_resolves_them() -> None:
    refused_for_mha = ("layer_first", "kernel_ascend", "mooncake")
    for case, sglang in zip(CASES, ask(HOOK_SCRIPT, CASES), strict=True):
        layout, io, backend = case
        mla = resolve_layout(layout, backend, io, mla=True)
        assert [mla.layout, mla.io_backend] == sglang, case
        if case == refused_for_mha:
            assert sglang == ["layer_first", "kernel_ascend"]  # kept, then fails in the store
            with pytest.raises(StepError, match="for an MHA model"):
                resolve_layout(layout, backend, io)
            continue
        mha = resolve_layout(layout, backend, io)
        assert [mha.layout, mha.io_backend] == sglang, case
