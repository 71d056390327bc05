"""A latency model for tiled candidates (tiling_search.py weighs it beside the arena).

Extra MACs alone mislead: a patch's halo adds MACs, but narrow patch rows also waste the
kernels that work on 16 columns at a time, and each kernel call has a set-up paid once per
patch. The int8 depthwise (HWC) kernel's time is almost all per channel block and per
16-column block of each input and output row, not per MAC: on the AVX-512 VNNI EPYC of
this project, MobileNetV2-96's 17 untiled depthwise layers (per-step profile, fastest of
12 x 40 runs) fit

    ns = 17.8 cb + 14.2 cb H ceil(W / 16) + 39.1 cb OH ceil(OW / 16),   cb = ceil(C / 16)

within 15 % (the constants below), so a 26-column patch row costs what 32 columns do while
a whole 48-column row costs 48. The stem is charged per MAC of 16-column output blocks
(STEM_NS_PER_MAC: the stem kernel has changed since the charge was set; see there);
the GEMM kernels cost what their MACs say (~7.5 ns per 1000 MACs) plus a call. Copies into
and out of patch buffers are per byte and per row copied (PATCH_SCALE and ROW_COPY_NS are
fitted on measured tiled builds). The figure reported is the model's latency of the whole
network tiled over untiled: full-width stripes (halo only vertical) then score by what they
are, more halo MACs at full column efficiency, against square patches with fewer MACs on
narrow rows. Other CPUs and fp32 kernels get the same shape with rough constants: the model
ranks candidates, benchmarks/tiling_arena.py measures them (``--top``).
"""

from __future__ import annotations

from collections.abc import Iterator
from math import ceil

from .graph import Graph, Step
from .tiling import Patch, TiledStep, Win, conv_params, macs

BLOCK = 16  # columns the int8 depthwise kernel processes at a time (the stem is charged so)
DW_NS = (17.8, 14.2, 39.1)  # per channel block; x input row blocks; x output row blocks
STEM_NS_PER_MAC = 0.0131  # per MAC of 16-column output blocks (padded columns count)
# Set in ff60902, whose record names no stem measurement; the charge fits an older kernel:
# since 0cae0f2 the stem's tiles run over ES_STEM_ROWS output rows flattened, whatever the
# row length, so no 16-column block is padded, and 4bc999e, 4f24ed4, 5da5e32 and 3b193d9
# sped it up (3x3/s2 on 96x96: 0.77, 0.94, 0.92, 0.90x). Measured at eba86b2 (the stem
# still changes: measure again before a refit) on tiling_arena.py's untiled MobileNetV2
# int8 (per-step profile, least of 12 rounds' means over 40 runs, load 5.5):
# 0.0104, 0.0113 and 0.0110 ns per plain MAC at 48, 40 and 32 output columns, 16-28 % under
# this charge. Not refitted alone: PATCH_SCALE and ROW_COPY_NS were fitted with this term in
# the model, so the three want one tiling_arena.py --top run. On MobileNetV2-96, 0.0109 ns
# per plain MAC moves the modelled ratios by at most 0.041 and none of the picks (half the
# bound and auto, float and int8 input).
GEMM_NS_PER_MAC = 0.0075  # int8 GEMM kernels (dot, channels-last, fast)
# fp32 and portable kernels: rough per-MAC costs relative to the int8 GEMM
NS_PER_MAC = {"es_dwconv2d_f32": 0.15, "es_conv2d_f32": 0.12, "es_conv2d_f32_gemm": 0.03,
              "es_conv2d_f32_wino": 0.02,
              "es_conv2d_i8": 0.05, "es_conv2d_i8_mcu": 0.05, "es_dwconv2d_i8_mcu": 0.15}
CALL_NS = 500.0  # set-up of one kernel call
COPY_NS_PER_BYTE = 0.15
# Fitted on the tiled builds themselves (benchmarks/tiling_arena.py --top 6, 8 builds,
# 5 layouts, fastest runs at load 9.4-9.8): the segment's modelled extra compute over
# untiled counts 0.67 (a patch's buffers stay in cache), and each row a window copy
# moves (one es_copy per plane row) ~21 ns; residuals were within 0.02 of untiled.
PATCH_SCALE = 0.67
ROW_COPY_NS = 20.6
ELTWISE_NS = 0.2  # per element of an element-wise step (quantize, add)


def blocks(n: int) -> int:
    return ceil(n / BLOCK)


def column_factor(fn: str, p: dict) -> float:
    """Columns a 16-column kernel processes per column of its input row (1 for others)."""
    w = int(p["W"])
    if fn not in ("es_dwconv2d_i8_hwc", "es_conv2d_i8_stem") or w <= 0:
        return 1.0
    return blocks(w) * BLOCK / w


def layer_ns(fn: str, p: dict | None, count: int) -> float:
    """Modelled ns of one call of a segment layer: a conv with es_conv_params ``p``, or an
    element-wise step over ``count`` elements."""
    if p is None:
        return ELTWISE_NS * count + CALL_NS / 2
    if fn == "es_dwconv2d_i8_hwc":
        cb = blocks(int(p["C"]))
        return cb * (DW_NS[0] + DW_NS[1] * p["H"] * blocks(p["W"])
                     + DW_NS[2] * p["OH"] * blocks(p["OW"])) + CALL_NS
    if fn == "es_conv2d_i8_stem":
        return STEM_NS_PER_MAC * macs(p) * blocks(p["OW"]) * BLOCK / p["OW"] + CALL_NS
    return NS_PER_MAC.get(fn, GEMM_NS_PER_MAC) * macs(p) + CALL_NS


def _copied_windows(st: TiledStep, pa: Patch) -> Iterator[tuple[Win, int, int]]:
    """(window, channels, element bytes) of each window a patch copies: its input window
    in, its output window out, and the wider window of each skip an Add reads."""
    yield pa.win[0], st.channels[0], st.elem[0]
    yield pa.win[-1], st.channels[-1], st.elem[-1]
    for sub in pa.sub:
        if sub is not None:
            yield sub[1], st.channels[-1], st.elem[-1]


def _patch_copies(st: TiledStep, pa: Patch) -> int:
    """Bytes a patch copies."""
    return sum((w[1] - w[0]) * (w[3] - w[2]) * c * e for w, c, e in _copied_windows(st, pa))


def tiled_cost(st: TiledStep) -> float:
    """Modelled ns of the tiled segment: every layer on every patch, plus copies."""
    total = 0.0
    for pa in st.patches:
        for k, layer in enumerate(st.layers):
            total += layer_ns(layer.calls[0].fn, pa.params[k], pa.counts[k])
        total += COPY_NS_PER_BYTE * _patch_copies(st, pa)
    return total


def step_cost(g: Graph, st: Step) -> float:
    """Modelled ns of one untiled step: a conv, else per element of its output (the
    network's other steps, pooling and the classifier, only enter the denominator)."""
    p = conv_params(st)
    if p is not None:
        return layer_ns(st.calls[0].fn, p, 0)
    size = sum(g.tensors[t].size for t in st.outputs if t in g.tensors)
    return ELTWISE_NS * size + CALL_NS / 2


def model_cost(g: Graph) -> float:
    return sum(step_cost(g, st) for st in g.steps)


def row_copies(st: TiledStep) -> int:
    """es_copy calls of the patches' window copies: one per plane row (in, out, skips);
    full-width stripes copy fewer, longer rows than square patches of the same area."""
    return sum(c * (w[1] - w[0]) for pa in st.patches for w, c, _ in _copied_windows(st, pa))


def latency_ratio(g: Graph, seg: list[Step], st: TiledStep, untiled: float) -> float:
    """Modelled latency of the network with ``seg`` tiled as ``st``, over untiled."""
    extra = tiled_cost(st) - sum(step_cost(g, s) for s in seg)
    return 1.0 + (PATCH_SCALE * extra + ROW_COPY_NS * row_copies(st)) / untiled \
        if untiled else 1.0
