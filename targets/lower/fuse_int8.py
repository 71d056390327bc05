"""Conv + residual Add (+ its fused Relu/Clip) as one step: the int8 pass over a lowered
graph that recognises an inverted-residual or ResNet block's end,

    DQ(x) -> Conv -> Q -> DQ -> Add(DQ(skip)) [-> Relu] -> Q

lowered as two steps (es_conv2d_i8_dot writing t, es_add_i8 reading t and skip), and
turns them into one es_conv2d_i8_dot_add call, which adds each chunk of the conv's
requantised output to skip while it is still in cache (kernels/conv_int8_dot.c). The add's
arithmetic is the same es_add_i8 on the same bytes, so the result is bit-identical to the
unfused pair; what goes is t's round trip through memory and a step.

The fused step sits where the conv was and reads skip there, so skip must already exist
then (produced by an earlier step, or a graph input) and the planner keeps it live up to
that step because the step lists it as an input. Anything else keeps the unfused pair:
another kernel for the conv (its epilogue has no add), a batch (several calls), t read by
more than the Add, a Sub, a broadcasting Add, skip produced after the conv, an output plane
under MIN_PLANE pixels.

``ES_NO_FUSE=1`` in the environment turns this pass (and the stem kernel choice,
int8_conv.py, and the SiLU table, int8_eltwise.py) off, so that a benchmark can build
the old and the new runtime side by side from one checkout; it is not a user setting.
"""

from __future__ import annotations

import os

from ..graph import Call, Graph, Ref, Step
from . import kernels as K

# the fused epilogue adds per channel in runs of at most 256 pixels; on smaller planes a
# call per channel and run cost more than the separate Add's one pass over the tensor
# (MobileNetV2-96, whose fused blocks are mostly 12x12 and smaller: 83 us fused against
# 73 us as conv + Add, sums of per-step minima on a loaded 2-core machine)
MIN_PLANE = 256


def disabled() -> bool:
    """ES_NO_FUSE set (benchmarks only): build as before this pass and the stem kernel."""
    return os.environ.get("ES_NO_FUSE", "") not in ("", "0")


def _swap_operands(q: dict) -> dict:
    """es_qadd_params with a and b exchanged: an Add is symmetric in its operands, bit for
    bit in both modes (the fixed-point sum of integers and one float32 addition commute), so
    the fused kernel can always take the conv's output as a."""
    out = dict(q)
    for f in ("zp", "mult", "shift", "scale"):
        out[f"a_{f}"], out[f"b_{f}"] = q[f"b_{f}"], q[f"a_{f}"]
    return out


def _fusable_add(g: Graph, conv_at: int, add: Step, t: str,
                 producer: dict[str, int]) -> tuple[str, dict] | None:
    """(skip tensor, es_qadd_params with a = t) when ``add`` can run in the conv's epilogue."""
    if len(add.calls) != 1 or add.calls[0].fn != "es_add_i8":
        return None
    a, b, _y, _n, q = add.calls[0].args
    if q.get("sub") or {a.name, b.name} == {t} or t not in (a.name, b.name):
        return None
    skip = b.name if a.name == t else a.name
    if g.tensors[skip].kind == "const" or producer.get(skip, -1) >= conv_at:
        return None
    return skip, (q if a.name == t else _swap_operands(q))


def fuse_conv_add(g: Graph) -> int:
    """Fuse every matching es_conv2d_i8_dot -> es_add_i8 pair (see the module docstring);
    returns how many."""
    if disabled():
        return 0
    readers: dict[str, list[int]] = {}
    producer: dict[str, int] = {}
    for i, st in enumerate(g.steps):
        for tname in st.inputs:
            readers.setdefault(tname, []).append(i)
        for tname in st.outputs:
            producer[tname] = i
    fused: set[int] = set()
    for i, st in enumerate(g.steps):
        if len(st.calls) != 1 or st.calls[0].kernel is not K.CONV_I8_DOT or len(st.outputs) != 1:
            continue
        t = st.outputs[0]
        rd = readers.get(t, [])
        cp = st.calls[0].args[-1]
        if cp["OH"] * cp["OW"] < MIN_PLANE:
            continue
        if t in g.outputs or len(rd) != 1 or g.tensors[t].kind != "act" or rd[0] in fused:
            continue
        add = g.steps[rd[0]]
        m = _fusable_add(g, i, add, t, producer)
        if m is None:
            continue
        skip, q = m
        y = add.outputs[0]
        args = st.calls[0].args
        st.calls = [Call("es_conv2d_i8_dot_add", [*args[:6], Ref(y), Ref(skip), q, "es_add_i8",
                                                  args[-1]], K.CONV_I8_DOT_ADD)]
        st.outputs = [y]
        st.inputs = [*st.inputs, skip]
        st.inplace = False
        fused.add(rd[0])
        producer[y] = i
        del g.tensors[t]
    g.steps[:] = [st for k, st in enumerate(g.steps) if k not in fused]
    return len(fused)
