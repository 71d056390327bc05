"""Per-op lowering, one module per op family.

The float lowerers outgrew one file; split by family, a family can be read and changed
without scrolling past the others, and ``common`` holds what two or more of them (and
the INT8 lowerings) share. The INT8 side is split by job: ``qdq`` (Q/DQ nodes and the
pattern helpers), ``requant`` (rescale factors), ``packing`` (weight layouts),
``kernels`` (which conv kernels exist and their scratch sizes), ``int8_conv`` (picking a
conv kernel), ``int8`` and ``int8_eltwise`` (the other quantized ops) and ``passes``
(whole-graph passes after lowering).

Importing this package is what registers the lowerers: each module's ``@lowers``
decorators (and the INT8 modules' table updates) fill ``registry.LOWER`` /
``registry.LOWER_INT8`` at import time. These modules import ``graph`` (the data
structures) and never ``ir`` (the driver), which imports them.
"""

from . import (  # noqa: F401  (registers lowerers)
    conv,
    elementwise,
    gru,
    int8,
    int8_conv,
    int8_eltwise,
    layernorm,
    linear,
    normalize,
    pool,
    qdq,
    resize,
    shape,
)
from .passes import INT8_PASSES
from .qdq import materialize_dequant, shift_uint8_to_int8
from .registry import LOWER, LOWER_INT8

__all__ = ["INT8_PASSES", "LOWER", "LOWER_INT8", "materialize_dequant", "shift_uint8_to_int8"]
