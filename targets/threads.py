"""``options: {threads: N}``: heavy steps split over N threads by output channel.

A heavy step (conv, depthwise, 1x1, dense; int8 and fp32) whose kernel can be handed a
slice of its output channels becomes N calls of the same, unchanged kernel, each on a
disjoint range of channels: its parameter block says M (and C for a depthwise conv) =
the slice's channels, and its pointers are moved to the slice's first weights, bias,
requantisation entries, input planes (depthwise only) and output planes. Outputs are
channel-major (CHW, or the dot kernel's channel-quad planes), so a range of channels is
one contiguous range of the output, written by one thread only. Each slice gets its own
scratch, planned in the arena once per slice (``Split.stride`` bytes apart): nothing is
allocated at run time. model.c runs the slices with ``es_parallel_for`` (es_threads.c),
on the pool es_init started, and returns when all are done.

Each output value is computed by the same code on the same operands as in the whole
call, so the outputs equal the single-thread ones exactly (int8 and fp32): slices start
on a multiple of the kernel's register block of channels (``_Rule.align``), so every
channel falls in the same position of a block as before. Kernels not listed in ``RULES``
(reference kernels, pooling, element-wise ops, grouped convs) run whole on the calling
thread; so do steps with fewer than ``min_macs`` multiply-accumulates, where waking the
pool costs more than it saves.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from .graph import Call, Graph, Ref, Step, Tensor

MAX_THREADS = 64  # es_threads.c's ES_POOL_MAX
DEFAULT_MIN_MACS = 200_000  # ~2 us of int8 work at this runtime's rates: a pool wake-up's cost


@dataclass(frozen=True)
class _Rule:
    """How to slice one kernel: argument positions, the channels a slice must start on,
    the weight elements one output channel owns, and whether it is a depthwise conv
    (input planes move with the output channels; weights channel-innermost, repacked)."""

    align: int
    w_per_channel: Callable[[dict], int]
    x: int = 0
    w: int = 1
    per_channel: tuple[int, ...] = (2, 3, 4)  # bias, mult, shift
    y: int = 6
    scratch: int | None = 5
    depthwise: bool = False
    dense: bool = False  # es_fc_params / es_gemm_params: N output features, M rows


def _c4(p: dict) -> int:
    return (p["C"] + 3) // 4


RULES: dict[str, _Rule] = {
    # w8 [M/8][KH][KW][C4][8][4]: 8 channels a block
    "es_conv2d_i8_dot": _Rule(8, lambda p: p["KH"] * p["KW"] * _c4(p) * 4),
    # wc [M/16][KH][KW][C4][16][4]
    "es_conv2d_i8_cl": _Rule(16, lambda p: p["KH"] * p["KW"] * _c4(p) * 4),
    # wp [M][ceil(K/2)] int32 pairs; a 4-channel register block
    "es_conv2d_i8_gemm": _Rule(4, lambda p: (p["C"] * p["KH"] * p["KW"] + 1) // 2),
    # wd [KH][KW][C16]: channel-innermost, so each slice gets its own packed tensor
    "es_dwconv2d_i8_hwc": _Rule(16, lambda p: 0, depthwise=True),
    # w in blocks of 16 channels, k-major inside ([M/16][K][16], lower/conv.py pack_f32_gemm;
    # before it [M][K]): channel m0, a multiple of 16, starts at m0 * K either way
    "es_conv2d_f32_gemm": _Rule(16, lambda p: p["C"] * p["KH"] * p["KW"], per_channel=(2,),
                                scratch=3, y=4),
    # u [M/16][16][C][16] (lower/conv.py pack_f32_wino): 16 C floats a channel, blocks of 16
    "es_conv2d_f32_wino": _Rule(16, lambda p: 16 * p["C"], per_channel=(2,), scratch=3, y=4),
    # w [C][1][KH][KW] float; channels are independent planes
    "es_dwconv2d_f32": _Rule(1, lambda p: p["KH"] * p["KW"], per_channel=(2,), scratch=3,
                             y=4, depthwise=True),
    # w [N][K] int8, four outputs a pass; rows M == 1 only (the output is then one row)
    "es_fc_i8": _Rule(4, lambda p: p["K"], y=5, scratch=None, dense=True),
    "es_gemm_f32": _Rule(4, lambda p: p["K"], per_channel=(2,), y=3, scratch=None,
                         dense=True),
}


@dataclass
class Split:
    """One step's slices: ``calls[k]`` is task k's call; each task's scratch starts at
    ``k * stride`` within the step's scratch (``scratch_c[k]``: its kernel's macro)."""

    calls: list[Call]
    ranges: list[tuple[int, int]]
    stride: int = 0
    scratch_c: list[str] = field(default_factory=list)
    replaced: str = ""  # whole depthwise weights the slices replace with their own


def _macs(p: dict, dense: bool) -> int:
    if dense:
        return p["M"] * p["N"] * p["K"]
    per_out = (p["C"] // p["group"]) * p["KH"] * p["KW"]
    return p["M"] * p["OH"] * p["OW"] * per_out


def _ranges(m: int, align: int, n: int) -> list[tuple[int, int]]:
    """[lo, hi) channel ranges: ``m`` channels in blocks of ``align``, blocks shared out
    as evenly as they go over at most ``n`` tasks (fewer blocks than threads: fewer)."""
    blocks = -(-m // align)
    tasks = min(n, blocks)
    bounds = [min(m, (blocks * k // tasks) * align) for k in range(tasks + 1)]
    return [(bounds[k], bounds[k + 1]) for k in range(tasks)]


def _slice_params(p: dict, lo: int, hi: int, rule: _Rule) -> dict:
    q = dict(p)
    if rule.dense:
        q["N"] = hi - lo
    elif rule.depthwise:
        q["C"] = q["M"] = q["group"] = hi - lo
    else:
        q["M"] = hi - lo
    return q


def _moved(a: Ref, by: int) -> Ref:
    return Ref(a.name, a.offset + by)


def _slice_call(g: Graph, c: Call, lo: int, hi: int, rule: _Rule, k: int) -> Call:
    """The call on output channels [lo, hi); scratch stays ``Ref("__scratch")`` (codegen
    points it at the task's own region)."""
    p = c.args[-1]
    args = list(c.args)
    args[-1] = _slice_params(p, lo, hi, rule)
    plane = 1 if rule.dense else p["OH"] * p["OW"]
    args[rule.y] = _moved(args[rule.y], lo * plane)
    for i in rule.per_channel:
        args[i] = _moved(args[i], lo)
    if rule.depthwise:
        args[rule.x] = _moved(args[rule.x], lo * p["H"] * p["W"])
    if c.fn == "es_dwconv2d_i8_hwc":
        args[rule.w] = Ref(_dw_slice_weights(g, args[rule.w], lo, hi, k))
    else:
        args[rule.w] = _moved(args[rule.w], lo * rule.w_per_channel(p))
    return Call(c.fn, args, c.kernel)


def _dw_slice_weights(g: Graph, w: Ref, lo: int, hi: int, k: int) -> str:
    """A [KH][KW][C16] tensor of channels [lo, hi) (lo a multiple of 16): the depthwise
    kernel reads 16 channels of a tap at once, with no stride between taps to skip the
    other slices' channels, so each slice gets its part packed on its own."""
    t = g.tensors[w.name]
    data = np.asarray(t.data).reshape(t.shape)
    hi16 = min(data.shape[-1], -(-hi // 16) * 16)
    part = np.ascontiguousarray(data[..., lo:hi16])
    name = f"{w.name}_thread{k}"
    g.tensors[name] = Tensor(name, part.shape, t.dtype, kind="const", data=part)
    return name


def _split_step(g: Graph, st: Step, n: int, min_macs: int) -> Split | None:
    if len(st.calls) != 1:
        return None
    c = st.calls[0]
    rule = RULES.get(c.fn)
    if rule is None or not isinstance(c.args[-1], dict):
        return None
    p = c.args[-1]
    if rule.dense and p["M"] != 1:
        return None
    if _macs(p, rule.dense) < min_macs:
        return None
    # an output in pixel quads is cut on its 16-channel blocks, where slice m0 starts at
    # byte m0 * OH * OW as in CHW
    align = max(rule.align, 16) if p.get("y_pquads") else rule.align
    ranges = _ranges(p["N"] if rule.dense else p["M"], align, n)
    if len(ranges) < 2:
        return None
    calls = [_slice_call(g, c, lo, hi, rule, k) for k, (lo, hi) in enumerate(ranges)]
    split = Split(calls, ranges)
    kern = c.kernel
    if rule.scratch is not None and kern is not None and kern.scratch is not None:
        need = max(kern.scratch(s.args[-1]) for s in calls)
        split.stride = -(-need // 64) * 64
        if kern.scratch_c is not None:
            split.scratch_c = [kern.scratch_c(s.args[-1]) for s in calls]
        st.scratch = split.stride * len(calls)
    return split


def apply(g: Graph, threads: int, min_macs: int = DEFAULT_MIN_MACS) -> dict[int, Split]:
    """Split the heavy steps of ``g`` over ``threads`` tasks, before the memory plan (the
    steps' scratch becomes one region per task). Returns ``{id(step): Split}``; empty
    for one thread, which leaves ``g`` exactly as it was. ``prune`` runs after tiling."""
    if threads <= 1:
        return {}
    splits: dict[int, Split] = {}
    for st in g.steps:
        s = _split_step(g, st, threads, min_macs)
        if s is not None:
            splits[id(st)] = s
            if st.calls[0].fn == "es_dwconv2d_i8_hwc":
                s.replaced = st.calls[0].args[1].name
    if any(s.replaced for s in splits.values()):
        # other weights than a threads-1 build: a weights.bin of one is refused by the other
        g.model_id = zlib.crc32(f"{g.model_id}:threads={threads}".encode()) & 0xFFFFFFFF
    return splits


def prune(g: Graph, splits: dict[int, Split]) -> None:
    """Drop the whole depthwise weights no step calls any more (after tiling, which may
    have taken a split step into a patch chain that runs the whole call), so weights.bin
    holds each depthwise layer's weights once."""
    whole = {s.replaced for s in splits.values() if s.replaced}
    if not whole:
        return
    used: set[str] = set()
    for st in g.steps:
        layers = getattr(st, "layers", None) or [st]  # a TiledStep runs its layers' calls
        for part in layers:
            calls = splits[id(part)].calls if id(part) in splits else part.calls
            used |= {a.name for c in calls for a in c.args if isinstance(a, Ref)}
    for name in whole - used:
        del g.tensors[name]
