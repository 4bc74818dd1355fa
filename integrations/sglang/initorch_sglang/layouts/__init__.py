"""The call maps as data, one module per SGLang code layout (see :mod:`.model`)."""

from __future__ import annotations

from initorch_sglang.layouts.model import (
    DEVICE_MODULE,
    AllocatorTable,
    EngineCall,
    EngineInit,
    Hop,
    Layout,
    Marker,
)
from initorch_sglang.layouts.recognise import LAYOUTS, layout_named, recognise

__all__ = ["DEVICE_MODULE", "LAYOUTS", "AllocatorTable", "EngineCall", "EngineInit", "Hop",
           "Layout", "Marker", "layout_named", "recognise"]
