"""INT8 lowering (QDQ patterns -> quantized kernels). Filled in below."""

from __future__ import annotations

from .ir import Lowerer, Value


def materialize_dequant(L: Lowerer, name: str, v: Value) -> Value:
    raise NotImplementedError
