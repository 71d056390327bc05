"""The C runtime's IR, as data: typed tensors and a flat list of steps of C calls.

These structures live apart from ``ir`` (the driver that fills them) so that the per-op
lowerings in ``lower/`` can build them without importing the driver that imports them:
``ir`` -> ``lower`` -> ``graph`` is one direction, with no import cycle to hold together.

A ``Tensor`` is one buffer: an activation (planned into the arena) or a constant (packed
into weights.bin in the layout its kernel wants). A ``Step`` is one ONNX node (or a fused
group, e.g. DQ->Conv->Relu->Q) and holds the C calls that implement it, with tensor
references resolved later by codegen.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

DTYPES = {"f32": (np.float32, "float"), "i8": (np.int8, "int8_t"), "i32": (np.int32, "int32_t"),
          "u8": (np.uint8, "uint8_t"), "i64": (np.int64, "int64_t")}


# edgesmith_rt.h's ES_MAX_BOUND_INPUTS: the input pointers (and flags) es_model holds
MAX_BOUND_INPUTS = 8


@dataclass
class Tensor:
    name: str
    shape: tuple[int, ...]
    dtype: str  # key of DTYPES
    kind: str = "act"  # act | input | output | const
    data: np.ndarray | None = None  # constants only, already packed
    scale: np.ndarray | None = None  # int8 activations: per-tensor scale (size 1)
    zero_point: int = 0
    slack: int = 0  # readable bytes the planner keeps after it (a kernel's vector overread)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) if self.shape else 1

    @property
    def nbytes(self) -> int:
        return self.size * np.dtype(DTYPES[self.dtype][0]).itemsize

    @property
    def ctype(self) -> str:
        return DTYPES[self.dtype][1]


@dataclass(frozen=True)
class Ref:
    """A tensor argument of a C call; ``offset`` in elements."""

    name: str
    offset: int = 0


@dataclass(frozen=True)
class Kernel:
    """What the generator knows of a C kernel beyond its name, stated once next to the
    lowering that picks it: the scratch bytes it needs for its parameters (Python, for the
    planner) and the edgesmith_rt.h macro that states the same size (C, checked against
    the plan when model.c compiles), whether it reads / writes the dot kernel's
    uint8 channel-quad planes (es_conv_params x_quads / y_quads), and whether it reads /
    writes the depthwise kernel's pixel quads (x_pquads / y_pquads)."""

    fn: str
    scratch: Callable[[dict], int] | None = None
    scratch_c: Callable[[dict], str] | None = None
    reads_quads: bool = False
    writes_quads: bool = False
    reads_pquads: bool = False
    writes_pquads: bool = False


@dataclass
class Call:
    fn: str
    args: list[Any]  # Ref | int | float | list[int] | list[float] | str (a C literal) | dict
    kernel: Kernel | None = None  # set where the call's scratch or layout is planned


def params(struct: str, **fields: Any) -> dict:
    """A kernel's parameter block, the dict form a Call carries: codegen writes it into
    model.c as a ``static const <struct>`` named after the step's ONNX node, one
    designated initialiser per field (int, float, list, or str for a C constant such as
    ``ES_U_RELU``), so a call passes ``&P_<node>`` where it would pass a row of numbers."""
    return {"__struct__": struct, **fields}


@dataclass
class Step:
    name: str  # ONNX node name (or the first node of a fused group)
    op: str  # ONNX op type, for hooks and the report
    inputs: list[str]  # activation tensors read
    outputs: list[str]  # activation tensors written
    calls: list[Call] = field(default_factory=list)
    inplace: bool = False  # outputs[0] may share inputs[0]'s buffer (element-wise ops)
    scratch: int = 0  # bytes of scratch the kernel needs (a tensor in the arena)


@dataclass
class Graph:
    tensors: dict[str, Tensor]
    steps: list[Step]
    inputs: list[str]
    outputs: list[str]
    input_names: list[str]  # ONNX names, same order
    output_names: list[str]
    precision: str = "fp32"
    model_id: int = 0  # 32-bit id tying weights.bin to the generated code
    # inputs a run may overwrite: their QuantizeLinear writes the int8 copy over the float
    # input's own arena slot (C option input: float_in_place, int8_input.py)
    consumed: tuple[str, ...] = ()

    def consts(self) -> list[Tensor]:
        return [t for t in self.tensors.values() if t.kind == "const"]


@dataclass
class Value:
    """What an ONNX value name stands for during lowering."""

    tensor: str  # the buffer
    shape: tuple[int, ...]
    deq: bool = False  # float view of an int8 tensor (a DequantizeLinear not yet run)


def c_ident(name: str) -> str:
    s = "".join(ch if ch.isalnum() else "_" for ch in name)
    return s if s and not s[0].isdigit() else "t_" + s
