"""The tables of per-op lowerers, filled by the lowering modules as they are imported.

``LOWER``: op type -> fn(lowerer, node), the float lowering every precision can fall back
to. ``LOWER_INT8``: op type -> fn(lowerer, node) -> bool, tried first for INT8 models; it
returns False where the node is not part of a quantized pattern it can fuse.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

LOWER: dict[str, Callable[[Any, Any], None]] = {}
LOWER_INT8: dict[str, Callable[[Any, Any], bool]] = {}


def lowers(*ops: str):
    """Register the decorated function as the float lowering of ``ops``."""
    def deco(fn):
        for op in ops:
            LOWER[op] = fn
        return fn
    return deco
