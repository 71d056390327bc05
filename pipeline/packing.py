"""A model with several outputs, packed into one tensor at load time.

Every converter, runner, validation, the C target and the device bench script handle one
output; a detector has one per stride. Rather than teach each of them lists, the model is
given one output here: a torch model is wrapped (``PackedOutputs``), an ONNX graph gets
Reshape + Concat nodes appended. The packing is recorded (``Packing.to_json``: each
output's name, per-sample shape, offset and length along the packed axis) in the
manifest, so a user and the device code can unpack.

Two layouts:

- ``channels``: every output is (N, C, H, W) with the same C: packed as (N, C, sum(H*W)),
  each map flattened row-major and concatenated in output order. This is YOLO's layout,
  which ``detection.decode`` reads and es_detect.c walks with a channel stride per level.
- ``flat``: anything else: each output flattened to (N, -1) and concatenated on axis 1.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edgesmith.convert.optimize import ort_session
from edgesmith.errors import ModelLoadError


@dataclass(frozen=True)
class Packing:
    """How several outputs sit in the packed one."""

    layout: str  # channels | flat
    names: tuple[str, ...]  # in packed order
    shapes: tuple[tuple[int, ...], ...]  # per sample (no batch axis), in packed order
    order: tuple[int, ...]  # packed position -> the model's output index

    @property
    def axis(self) -> int:
        return 2 if self.layout == "channels" else 1

    @property
    def lengths(self) -> list[int]:
        """Each output's extent along the packed axis: H*W cells, or all its elements."""
        if self.layout == "channels":
            return [math.prod(s[1:]) for s in self.shapes]
        return [math.prod(s) for s in self.shapes]

    @property
    def packed_shape(self) -> list[int]:
        """The packed output's per-sample shape."""
        total = sum(self.lengths)
        return [self.shapes[0][0], total] if self.layout == "channels" else [total]

    def to_json(self) -> dict[str, Any]:
        offsets = np.cumsum([0, *self.lengths])
        return {"layout": self.layout, "axis": self.axis,
                "packed_shape": ["N", *self.packed_shape],
                "outputs": [{"name": n, "index": i, "shape": ["N", *s], "offset": int(o),
                             "length": ln}
                            for n, i, s, o, ln in zip(self.names, self.order, self.shapes,
                                                      offsets, self.lengths, strict=False)]}

    def unpack(self, packed: np.ndarray) -> list[np.ndarray]:
        """The packed array (N, ...) back into the model's outputs, in the model's order."""
        offsets = np.cumsum([0, *self.lengths])
        cut = [np.take(packed, np.arange(a, b), axis=self.axis)
               for a, b in zip(offsets[:-1], offsets[1:], strict=True)]
        outs = [c.reshape(len(packed), *s) for c, s in zip(cut, self.shapes, strict=True)]
        return [outs[self.order.index(i)] for i in range(len(outs))]


def plan(names: Sequence[str], shapes: Sequence[Sequence[int]]) -> Packing:
    """The layout for outputs of these (batched) shapes: ``channels`` when every output is
    (N, C, H, W) with one C, maps with more cells first (the finest stride first, the
    order ``detection.unpack`` and es_detect.c read), else ``flat`` in output order."""
    per_sample = [tuple(int(d) for d in s[1:]) for s in shapes]
    spatial = all(len(s) == 3 for s in per_sample) and len({s[0] for s in per_sample}) == 1
    order = (sorted(range(len(names)), key=lambda i: -per_sample[i][1] * per_sample[i][2])
             if spatial else range(len(names)))
    return Packing("channels" if spatial else "flat", tuple(names[i] for i in order),
                   tuple(per_sample[i] for i in order), tuple(order))


# -- torch -------------------------------------------------------------------------------

@functools.cache
def _wrapper_class() -> type:
    """Defined on first use: this module is imported without torch (the CLI's start-up)."""
    import torch

    class PackedOutputs(torch.nn.Module):
        """``model`` with its outputs packed into one tensor as ``packing`` says. Reshapes
        use -1 for the batch and fixed sizes for the rest, so the ONNX export is a plain
        Reshape with a constant shape per output, then one Concat."""

        def __init__(self, model: torch.nn.Module, packing: Packing):
            super().__init__()
            self.model = model
            self.layout = packing.layout
            self.sizes = [(s[0], n) if packing.layout == "channels" else (n,)
                          for s, n in zip(packing.shapes, packing.lengths, strict=True)]

            self.order = list(packing.order)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            outs = self.model(x)
            return torch.cat([outs[i].reshape(-1, *size) for i, size in zip(self.order,
                                                                            self.sizes,
                                                                            strict=True)],
                             dim=2 if self.layout == "channels" else 1)

    return PackedOutputs


def torch_outputs(out: Any, where: str) -> list[Any] | None:
    """The forward's tensors when it returned several (a tuple or list); None for one
    tensor; anything else is a ModelLoadError saying what forward returned."""
    import torch

    if isinstance(out, torch.Tensor):
        return None
    if isinstance(out, tuple | list) and len(out) > 0 and all(
            isinstance(o, torch.Tensor) for o in out):
        return list(out)
    what = type(out).__name__
    if isinstance(out, tuple | list):
        what += " of " + ", ".join(sorted({type(o).__name__ for o in out})) if out else " (empty)"
    raise ModelLoadError(f"forward returned {what}; expected one tensor or a tuple of tensors",
                         where=where, fix="return the output tensor(s) from forward() "
                                          "(a dict: return its values as a tuple)")


def pack_torch(model: Any, x: np.ndarray, where: str) -> tuple[Any, Packing | None]:
    """``model`` (wrapped when its forward returns several tensors) and the packing."""
    import torch

    with torch.no_grad():
        outs = torch_outputs(model(torch.from_numpy(np.ascontiguousarray(x[:2]))), where)
    if outs is None:
        return model, None
    packing = plan([f"output{i}" for i in range(len(outs))], [tuple(o.shape) for o in outs])
    return _wrapper_class()(model, packing).eval(), packing


# -- ONNX --------------------------------------------------------------------------------

def pack_onnx(source: Path | bytes, x: np.ndarray, max_batch: int | None
              ) -> tuple[bytes, Packing] | None:
    """The graph with one output packing all of them (Reshape per output + Concat), and
    the packing; None when the graph has one output. Shapes come from a run on ``x``."""
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.load_from_string(source) if isinstance(source, bytes) else onnx.load(
        str(source))
    if len(model.graph.output) < 2:
        return None
    sess = ort_session(model.SerializeToString(), log_level=4)
    feed = np.ascontiguousarray(x[:max_batch or 2], dtype=np.float32)
    outs = sess.run(None, {sess.get_inputs()[0].name: feed})
    names = [o.name for o in model.graph.output]
    packing = plan(names, [o.shape for o in outs])
    taken = {n for node in model.graph.node for n in node.output} | {
        i.name for i in model.graph.input} | {t.name for t in model.graph.initializer}
    packed = _fresh("packed_output", taken)
    parts = []
    for name, size, shape in zip(packing.names, packing.lengths, packing.shapes,
                                 strict=True):
        dims = [-1, shape[0], size] if packing.layout == "channels" else [-1, size]
        const, flat = _fresh(f"{name}_pack_shape", taken), _fresh(f"{name}_packed", taken)
        taken |= {const, flat}
        model.graph.initializer.append(numpy_helper.from_array(np.asarray(dims, np.int64),
                                                               const))
        model.graph.node.append(helper.make_node("Reshape", [name, const], [flat],
                                                 name=f"pack_{name}"))
        parts.append(flat)
    model.graph.node.append(helper.make_node("Concat", parts, [packed], name="pack_outputs",
                                             axis=packing.axis))
    elem = model.graph.output[0].type.tensor_type.elem_type
    batch = "batch" if max_batch is None else 1
    del model.graph.output[:]
    model.graph.output.append(helper.make_tensor_value_info(
        packed, elem, [batch, *packing.packed_shape]))
    return model.SerializeToString(), packing


def _fresh(name: str, taken: set[str]) -> str:
    """``name``, or ``name_1``, ``name_2``... when the graph already uses it."""
    out, i = name, 0
    while out in taken:
        i += 1
        out = f"{name}_{i}"
    return out
