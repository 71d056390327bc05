"""Whole-graph passes over a lowered INT8 graph, run by ``ir.lower`` in the order of
``INT8_PASSES`` once every node is lowered (a pass sees producers and readers that a
per-node lowering cannot): the depthwise -> 1x1 quad hand-over, the 1x1 -> depthwise
pixel-quad hand-over, then conv + residual Add fusion (fuse_int8.py)."""

from __future__ import annotations

from ..graph import Graph, Step
from .fuse_int8 import fuse_conv_add
from .kernels import dw_hwc_whole_plane


def _single_kernel_call(st: Step):
    """The one call of a step that planned its kernel, else None."""
    return st.calls[0] if len(st.calls) == 1 and st.calls[0].kernel is not None else None


def _reads_planes_in_place(p: dict) -> bool:
    """A 1x1, stride-1, unpadded conv with whole channel quads: its input pixels are its
    output pixels, so it can read quad planes as they are."""
    return (not p["C"] % 4 and (p["KH"], p["KW"], p["SH"], p["SW"], p["PT"], p["PL"])
            == (1, 1, 1, 1, 0, 0) and (p["OH"], p["OW"]) == (p["H"], p["W"]))


def _hand_overs(g: Graph, reads: str, writes: str):
    """(reader step, reader call, producer call) for each step whose one kernel call can
    read a layout (Kernel flag ``reads``) from a producer whose one call can write it
    (``writes``): the tensor between them an activation, not a graph output, with that
    step its one reader. Whether the two calls' params allow it is the caller's test."""
    readers: dict[str, int] = {}
    for st in g.steps:
        for t in st.inputs:
            readers[t] = readers.get(t, 0) + 1
    producer = {t: st for st in g.steps for t in st.outputs}
    for st in g.steps:
        call = _single_kernel_call(st)
        if call is None or not getattr(call.kernel, reads):
            continue
        x = st.inputs[0]
        src = producer.get(x)
        src_call = _single_kernel_call(src) if src is not None else None
        if (src_call is not None and getattr(src_call.kernel, writes) and readers.get(x) == 1
                and g.tensors[x].kind == "act" and x not in g.outputs):
            yield st, call, src_call


def hand_over_quads(g: Graph) -> int:
    """Depthwise conv -> 1x1 conv pairs (an inverted residual block's middle) that keep the
    tensor between them in es_conv2d_i8_dot's input layout, uint8 channel-quad planes
    (es_conv_params y_quads / x_quads): the depthwise kernel writes them in one dword
    transpose per 16 pixels instead of transposing to CHW, and the 1x1 conv skips turning
    CHW back into planes. Only where the producer's kernel can write the planes, the
    reader's kernel can read them, the 1x1 conv is the tensor's one reader and reads it in
    place (stride 1, unpadded, batch 1) and the channels fill whole quads. The tensor gets
    64 bytes of slack, which the dot kernel's last tile may read. Returns the count."""
    n = 0
    for st, call, src_call in _hand_overs(g, "reads_quads", "writes_quads"):
        p = call.args[-1]
        if not _reads_planes_in_place(p):
            continue
        p["x_quads"] = 1
        src_call.args[-1]["y_quads"] = 1
        st.scratch = call.kernel.scratch(p)
        g.tensors[st.inputs[0]].slack = 64
        n += 1
    return n


def _writes_pixel_quads(fn: str, p: dict) -> bool:
    """Whole blocks of 16 output channels, and tiles of output pixels that start on whole
    quads: the stem's (rows of OW pixels, and the reader's rows are whole quads), a 1x1,
    stride-1, unpadded conv's on the dot kernel (output pixel j is flattened position j;
    a padded walk's tiles start wherever its rows' segments do)."""
    return not p["M"] % 16 and (fn == "es_conv2d_i8_stem" or _reads_planes_in_place(p))


def _reads_pixel_quads(p: dict) -> bool:
    """A depthwise conv over whole 16-channel blocks whose rows are whole quads, with
    undilated columns (its row loader reads 4 consecutive columns per dword), and not one
    that holds its whole plane in the ring (that path batches rows, which pixel quads
    would cost it)."""
    return (not p["C"] % 16 and not p["W"] % 4 and p["DW"] == 1
            and not dw_hwc_whole_plane(p))


def hand_over_pixel_quads(g: Graph) -> int:
    """1x1 conv or stem -> depthwise conv pairs (an inverted residual block's expansion and
    its depthwise layer, a MobileNet's stem and its first one) that keep the tensor between
    them in the depthwise kernel's input layout, pixel quads (es_conv_params y_pquads /
    x_pquads): 16 channels x 4 consecutive pixels per 64 bytes, +128, so the depthwise row
    loader reads each 4-column dword of 16 channels as it is instead of transposing 16
    channel rows of CHW (the larger part of a stride-2 depthwise layer on a 48-wide
    plane), and the producer packs four channels' rows per vector and stores 32 bytes per
    quad after one qword permute per two quads. Only where the producer runs on
    the dot or stem kernel (the same tiles), the depthwise conv is the tensor's one reader,
    and both sides meet the layout's conditions above. Returns the count."""
    n = 0
    for _, call, src_call in _hand_overs(g, "reads_pquads", "writes_pquads"):
        p = call.args[-1]
        if not (_writes_pixel_quads(src_call.fn, src_call.args[-1]) and _reads_pixel_quads(p)):
            continue
        p["x_pquads"] = 1
        src_call.args[-1]["y_pquads"] = 1
        n += 1
    return n


INT8_PASSES = (hand_over_quads, hand_over_pixel_quads, fuse_conv_add)
