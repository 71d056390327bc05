"""Patch-based (tiled) execution of a network's first layers, after MCUNetV2.

The early high-resolution layers of a CNN hold the largest activations, and the
tensor-level plan (``planner.plan``) can go no lower than the bytes live at its worst
step. Running a segment of the first layers on spatial patches instead, each patch with
the halo its receptive field needs, keeps only one patch of each intermediate tensor
alive; the segment's input and its full-size output stay in the arena and later layers run
per layer as before. The price is recomputed halo pixels: extra MACs, reported.

The segment is a run of steps in graph order, closed (nothing outside reads a tensor it
makes, but its last output): convolutions (one-call steps whose kernel takes
es_conv_params: conv, depthwise and their fused Relu/Clip, fp32 or int8) and the
element-wise steps that keep the window (the input's QuantizeLinear, residual Add). So an
inverted-residual block runs inside a patch: the block input's patch is live until the Add.
Every tensor gets, per patch, the window its readers need (their union); a conv reads
exactly its input's window, and an Add whose skip input holds a wider window (the conv
branch needed the halo) has the skip's rows copied into its output buffer first, then adds
in place; a conv with the Add fused into it (es_conv2d_i8_dot_add, lower/fuse_int8.py) gets
the skip's rows copied into a buffer of its own. A border patch keeps the layer's padding
on the sides it shares with the image (PT/PL, and the kernel's implied bottom/right
padding), so the result is the untiled one.
Quantizing inside the segment moves the int8 peak too: the int8 copy of the input never
exists whole.

Which segment and grid is tiling_search.py's (the pass, ``apply``); the C code is
tiling_c.py's.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from itertools import pairwise
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag

from .graph import Call, Graph, Ref, Step
from .planner import Interval, align, place

CONV_KERNELS = frozenset({
    "es_conv2d_f32", "es_conv2d_f32_gemm", "es_conv2d_f32_wino", "es_dwconv2d_f32", "es_conv2d_i8",
    "es_conv2d_i8_fast", "es_conv2d_i8_gemm", "es_conv2d_i8_dot", "es_conv2d_i8_cl",
    "es_dwconv2d_i8_hwc", "es_conv2d_i8_mcu", "es_dwconv2d_i8_mcu", "es_conv2d_i8_stem",
    "es_conv2d_i8_dot_add"})
# a conv with a residual add in its epilogue (lower/fuse_int8.py): inputs (x, skip), the
# skip read over the output's window from a buffer of its own (not the output's)
CONV_ADD = "es_conv2d_i8_dot_add"
# element-wise kernels a patch can run: the argument holding the element count
ELTWISE_COUNT = {"es_quantize_f32_i8": 2, "es_add_i8": 3, "es_binary_f32": 4}
ADDS = frozenset({"es_add_i8", "es_binary_f32"})
SLACK = 64  # readable bytes after each patch buffer (quad planes, vector overreads)


class TilingForce(BaseModel):
    """``tiling: {patches: N, split: S}``: an N x N grid over the segment that ends at step
    S (its ONNX node name, or its index in the per-layer plan `edgesmith plan` draws);
    ``cols: M`` makes it N rows x M columns (``cols: 1``: full-width stripes, whose rows
    keep the tensor's whole width, so the halo is only vertical)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    patches: int = Field(..., ge=1, le=16, description="patches per side (N x N), or rows")
    split: int | str = Field(..., description="last tiled step: node name or step index")
    cols: int | None = Field(None, ge=1, le=16, description="patch columns (default: patches)")


@dataclass(frozen=True)
class Layout:
    """Where the patches cut the segment's output: row bounds and column bounds (each from
    0 to the tensor's height or width). Even cuts are ``even``; the search also weighs
    stripes and uneven column cuts (tiling_search.py)."""

    rows: tuple[int, ...]
    cols: tuple[int, ...]

    @classmethod
    def even(cls, oh: int, ow: int, nr: int, nc: int) -> Layout:
        return cls(tuple(oh * i // nr for i in range(nr + 1)),
                   tuple(ow * i // nc for i in range(nc + 1)))

    @property
    def shape(self) -> tuple[int, int]:
        return len(self.rows) - 1, len(self.cols) - 1

    def describe(self) -> str:
        """'2x2', '4x1 stripes' or '2x2, cols cut at 10' (uneven)."""
        nr, nc = self.shape
        text = f"{nr}x{nc}" + (" stripes" if nc == 1 and nr > 1 else "")
        uneven = [f"{name} cut at {', '.join(map(str, b[1:-1]))}"
                  for name, b in (("rows", self.rows), ("cols", self.cols))
                  if b != Layout.even(b[-1], 1, len(b) - 1, 1).rows]
        return ", ".join([text, *uneven])


def _tiling_kind(v: Any) -> str:
    """A mapping is a forced grid, anything else a mode: so a bad grid's error names its
    field (``cols: 0``) instead of saying it is not 'off' or 'auto'."""
    return "force" if isinstance(v, dict | TilingForce) else "mode"


TilingOption = Annotated[Annotated[Literal["off", "auto"], Tag("mode")]
                         | Annotated[TilingForce, Tag("force")],
                         Discriminator(_tiling_kind)] | None
Win = tuple[int, int, int, int]  # rows [r0, r1) x cols [c0, c1) of one tensor on one patch


@dataclass
class Patch:
    row: int
    col: int
    win: list[Win]  # each tensor's window (TiledStep.tensors order)
    params: list[dict | None]  # each layer's es_conv_params on this patch (None: eltwise)
    counts: list[int]  # each element-wise layer's element count on this patch (0: conv)
    # an Add (or a conv's fused Add) whose input ``j`` holds a wider window: (j, window it
    # reads), else None; copied into the Add's output buffer (the fused one: its skip buffer)
    sub: list[tuple[int, Win] | None]


@dataclass
class TiledStep(Step):
    """The segment run patch by patch: one step for the planner and the hooks;
    tiling_c.tiled_case writes its patches."""

    layers: list[Step] = field(default_factory=list)  # the segment's steps
    tensors: list[str] = field(default_factory=list)  # its input, then each layer's output
    patches: list[Patch] = field(default_factory=list)
    buffers: list[tuple[int, int]] = field(default_factory=list)  # (offset, bytes) per tensor
    kernel_scratch: list[tuple[int, int]] = field(default_factory=list)  # per layer
    skip_buffers: list[tuple[int, int]] = field(default_factory=list)  # per layer (fused Add)
    elem: list[int] = field(default_factory=list)  # element bytes of each tensor
    channels: list[int] = field(default_factory=list)
    ctypes: list[str] = field(default_factory=list)
    full_hw: list[tuple[int, int]] = field(default_factory=list)  # (H, W) of each tensor
    # the first layer quantizes the input: it runs as the copy-in, row by row from the
    # full float input, so no float window is ever copied (buffer 0 is empty)
    quantize_in: bool = False
    layout: Layout | None = None  # where the patches cut the segment's output


# -- the steps a patch can run ----------------------------------------------------------------
def conv_params(st: Step) -> dict | None:
    """The es_conv_params of a one-call conv step a patch can run, else None."""
    if len(st.calls) != 1 or st.calls[0].fn not in CONV_KERNELS:
        return None
    p = st.calls[0].args[-1]
    if not isinstance(p, dict) or p.get("__struct__") != "es_conv_params":
        return None
    refs = [a for a in st.calls[0].args if isinstance(a, Ref)]
    n_in = 2 if st.calls[0].fn == CONV_ADD else 1
    if any(r.offset for r in refs) or len(st.inputs) != n_in or len(st.outputs) != 1:
        return None
    return p


def _eltwise(g: Graph, st: Step) -> bool:
    """A one-call element-wise step over same-shaped tensors (no broadcast)."""
    if len(st.calls) != 1 or st.calls[0].fn not in ELTWISE_COUNT or len(st.outputs) != 1:
        return False
    c = st.calls[0]
    shape = g.tensors[st.outputs[0]].shape
    if any(isinstance(a, Ref) and a.offset for a in c.args) or len(set(st.inputs)) != len(
            st.inputs) or any(g.tensors[t].shape != shape for t in st.inputs):
        return False
    if c.fn == "es_binary_f32":
        b = c.args[4]
        return (c.args[3] in ("ES_B_ADD", "ES_B_ADD_RELU") and isinstance(b, dict)
                and b.get("ndim") == 1
                and b["sa"][0] == 1 and b["sb"][0] == 1)
    return c.fn in ADDS or len(st.inputs) == 1


def _is_4d(g: Graph, t: str) -> bool:
    s = g.tensors[t].shape
    return len(s) == 4 and s[0] == 1


def _reads_layout(p: dict) -> bool:
    """Whether conv params ``p`` read a hand-over layout (channel or pixel quads), not CHW."""
    return bool(p.get("x_quads") or p.get("x_pquads"))


def find_segment(g: Graph) -> tuple[int, list[Step], list[int]]:
    """(index of the first step, the steps that could run per patch, the lengths at which
    the segment is closed). It starts at the first conv (or the QuantizeLinear of the input
    right before it) and runs while each step is a conv or a same-shape element-wise step
    reading only the segment's input or tensors it made."""
    first = next((i for i, st in enumerate(g.steps) if conv_params(st) is not None), None)
    if first is None or _reads_layout(conv_params(g.steps[first])):
        return 0, [], []
    start = first
    prev = g.steps[first - 1] if first else None
    if (prev is not None and _eltwise(g, prev) and len(prev.inputs) == 1
            and prev.outputs[0] == g.steps[first].inputs[0] and prev.inputs[0] in g.inputs):
        start = first - 1
    seg_in = g.steps[start].inputs[0]
    if not _is_4d(g, seg_in):
        return 0, [], []
    made: set[str] = set()
    writes_quads: set[str] = set()
    seg: list[Step] = []
    for st in g.steps[start:]:
        p = conv_params(st)
        if p is None and not _eltwise(g, st):
            break
        if any(t != seg_in and t not in made for t in st.inputs) or not _is_4d(g, st.outputs[0]):
            break
        if p is None and any(t in writes_quads for t in st.inputs):
            break  # element-wise steps read plain CHW
        if p is not None and _reads_layout(p) and st.inputs[0] not in writes_quads:
            break
        if p is not None and any(t in writes_quads for t in st.inputs[1:]):
            break  # a fused Add's skip is plain CHW
        seg.append(st)
        made.add(st.outputs[0])
        if p is not None and (p.get("y_quads") or p.get("y_pquads")):
            writes_quads.add(st.outputs[0])
    readers: dict[str, int] = {}
    for i, st in enumerate(g.steps):
        for t in st.inputs:
            readers[t] = max(readers.get(t, -1), i)
    ends = []
    for k, st in enumerate(seg):
        inner = [s.outputs[0] for s in seg[:k]]
        out = st.outputs[0]
        if (all(readers.get(t, -1) <= start + k and t not in g.outputs for t in inner)
                and all(g.tensors[t].kind == "act" for t in (*inner, out))
                and out not in writes_quads and seg_in not in inner):
            ends.append(k + 1)
    return start, seg, ends


# -- geometry --------------------------------------------------------------------------------
def _back(olo: int, ohi: int, n_in: int, s: int, pad: int, k: int, d: int) -> tuple[int, int, int]:
    """(lo, hi, pad): the input rows output rows [olo, ohi) read, clipped to the tensor;
    what is cut off is the layer's padding, which the kernel makes itself."""
    lo, hi = olo * s - pad, (ohi - 1) * s - pad + (k - 1) * d + 1
    clo, chi = max(lo, 0), min(hi, n_in)
    return clo, chi, clo - lo


def _union(a: Win | None, b: Win) -> Win:
    return b if a is None else (min(a[0], b[0]), max(a[1], b[1]), min(a[2], b[2]),
                                max(a[3], b[3]))


def _one_patch(g: Graph, seg: list[Step], tens: list[str], r: int, c: int,
               cell: Win) -> Patch | None:
    """One patch's windows, from the segment's output cell back to its input; None when a
    conv would have to read part of its input's window (the segment is not tileable so)."""
    idx = {t: j for j, t in enumerate(tens)}
    win: dict[str, Win] = {tens[-1]: cell}
    needs: list[list[Win]] = [[] for _ in seg]
    params: list[dict | None] = [None] * len(seg)
    counts = [0] * len(seg)
    for k in reversed(range(len(seg))):
        st = seg[k]
        w = win[st.outputs[0]]
        p = conv_params(st)
        if p is not None:
            r0, r1, pt = _back(w[0], w[1], p["H"], p["SH"], p["PT"], p["KH"], p["DH"])
            c0, c1, pl = _back(w[2], w[3], p["W"], p["SW"], p["PL"], p["KW"], p["DW"])
            # pixel quads need whole quads per row, which a patch's window does not have:
            # inside a segment the pair hands over CHW again (find_segment keeps pairs whole)
            params[k] = {**p, "H": r1 - r0, "W": c1 - c0, "OH": w[1] - w[0],
                         "OW": w[3] - w[2], "PT": pt, "PL": pl, "x_pquads": 0, "y_pquads": 0}
            needs[k] = [(r0, r1, c0, c1)] + [w] * (len(st.inputs) - 1)  # (x, skip)
        else:
            needs[k] = [w] * len(st.inputs)
            counts[k] = g.tensors[st.outputs[0]].shape[1] * (w[1] - w[0]) * (w[3] - w[2])
        for t, need in zip(st.inputs, needs[k], strict=True):
            win[t] = _union(win.get(t), need)
    sub: list[tuple[int, Win] | None] = [None] * len(seg)
    for k, st in enumerate(seg):
        wider = [j for j, t in enumerate(st.inputs) if win[t] != needs[k][j]]
        if not wider:
            continue
        if (st.calls[0].fn not in ADDS or len(wider) != 1) and not (
                st.calls[0].fn == CONV_ADD and wider == [1]):
            return None
        sub[k] = (wider[0], needs[k][wider[0]])
    return Patch(r, c, [win[t] for t in tens], params, counts, sub) if len(win) == len(
        idx) else None


def patch_windows(g: Graph, seg: list[Step], layout: Layout) -> list[Patch] | None:
    tens = [seg[0].inputs[0]] + [st.outputs[0] for st in seg]
    _, _, oh, ow = g.tensors[tens[-1]].shape
    if layout.rows[-1] != oh or layout.cols[-1] != ow:
        return None
    out = []
    for r, (r0, r1) in enumerate(pairwise(layout.rows)):
        for c, (c0, c1) in enumerate(pairwise(layout.cols)):
            pa = _one_patch(g, seg, tens, r, c, (r0, r1, c0, c1))
            if pa is None:
                return None
            out.append(pa)
    return out


def macs(p: dict) -> int:
    return int(p["M"]) * int(p["C"]) // int(p["group"]) * p["KH"] * p["KW"] * p["OH"] * p["OW"]


def halo(ps: list[dict]) -> int:
    """Input rows two neighbouring patches both read: the receptive field of the segment's
    convs (its main path: a residual skip adds none) less their stride."""
    rf, jump = 1, 1
    for p in ps:
        rf += (p["KH"] - 1) * p["DH"] * jump
        jump *= p["SH"]
    return rf - jump


# -- one candidate -----------------------------------------------------------------------------
def _intervals(g: Graph, seg: list[Step], tens: list[str], patches: list[Patch],
               alignment: int) -> tuple[list[int], list[int], list[Interval]]:
    """(bytes of each tensor's patch buffer, each layer's kernel scratch, the intervals):
    copy-in is position 0, layer k is k + 1, copy-out n + 1."""
    n = len(seg)
    sizes = []
    for j, t in enumerate(tens):
        tt = g.tensors[t]
        elem = tt.nbytes // max(tt.size, 1)
        area = max((w[1] - w[0]) * (w[3] - w[2]) for w in (pa.win[j] for pa in patches))
        sizes.append(tt.shape[1] * area * elem + SLACK)
    if _quantize_in(seg):
        sizes[0] = 0
    last = {t: n + 1 if j == n else j for j, t in enumerate(tens)}
    for k, st in enumerate(seg):
        for t in st.inputs:
            last[t] = max(last[t], k + 1)
    ivs = [Interval(f"buf{j}", j, last[t], align(s, alignment))
           for j, (t, s) in enumerate(zip(tens, sizes, strict=True)) if s]
    for k, st in enumerate(seg):
        if st.calls[0].fn == CONV_ADD:
            tt = g.tensors[st.outputs[0]]
            area = max((w[1] - w[0]) * (w[3] - w[2]) for w in (pa.win[k + 1] for pa in patches))
            ivs.append(Interval(f"skip{k}", k + 1, k + 1,
                                align(tt.shape[1] * area * tt.nbytes // max(tt.size, 1) + SLACK,
                                      alignment)))
    scratch = []
    for k, st in enumerate(seg):
        kern = st.calls[0].kernel
        need = max((kern.scratch(pa.params[k]) for pa in patches), default=0) \
            if kern is not None and kern.scratch is not None and patches[0].params[k] else 0
        scratch.append(need)
        if need:
            ivs.append(Interval(f"scratch{k}", k + 1, k + 1, align(need, alignment)))
    return sizes, scratch, ivs


def _quantize_in(seg: list[Step]) -> bool:
    return seg[0].calls[0].fn == "es_quantize_f32_i8"


def build_tiled(g: Graph, start: int, seg: list[Step], layout: Layout,
                alignment: int) -> tuple[Graph, TiledStep] | None:
    """``g`` with ``seg`` (steps ``start``...) replaced by one TiledStep on the patches of
    ``layout``; the segment's inner tensors leave the arena for patch buffers. None when
    the segment cannot run on that layout."""
    patches = patch_windows(g, seg, layout)
    if patches is None:
        return None
    tens = [seg[0].inputs[0]] + [st.outputs[0] for st in seg]
    sizes, scratch, ivs = _intervals(g, seg, tens, patches, alignment)
    offsets, total, _ = place(ivs)
    tiled = TiledStep(
        name=f"{seg[0].name}..{seg[-1].name}" if len(seg) > 1 else seg[0].name,
        op="Tiled{}x{}".format(*layout.shape), inputs=[tens[0]], outputs=[tens[-1]],
        # the layers' kernels, for the sources codegen copies; kernel=None: the patch
        # scratch is checked per patch (tiling_c), not against the full size
        calls=[Call(st.calls[0].fn, st.calls[0].args) for st in seg],
        scratch=total, layers=list(seg), tensors=tens, patches=patches,
        buffers=[(offsets.get(f"buf{j}", 0), s) for j, s in enumerate(sizes)],
        quantize_in=_quantize_in(seg), layout=layout,
        kernel_scratch=[(offsets.get(f"scratch{k}", 0), s) for k, s in enumerate(scratch)],
        skip_buffers=[(offsets.get(f"skip{k}", 0), next(
            (iv.size for iv in ivs if iv.name == f"skip{k}"), 0)) for k in range(len(seg))],
        elem=[g.tensors[t].nbytes // max(g.tensors[t].size, 1) for t in tens],
        channels=[g.tensors[t].shape[1] for t in tens],
        ctypes=[g.tensors[t].ctype for t in tens],
        full_hw=[tuple(g.tensors[t].shape[2:4]) for t in tens])
    tensors = {k: v for k, v in g.tensors.items() if k not in tens[1:-1]}
    steps = g.steps[:start] + [tiled] + g.steps[start + len(seg):]
    return replace(g, tensors=tensors, steps=steps), tiled


def budget_note(t: dict[str, Any] | None) -> str:
    """What tiling could do, for the message of an arena budget miss ("" when untried)."""
    if not t:
        return ""
    bound = f"tensor-level lower bound {t['lower_bound_untiled_bytes']} B"
    if not t.get("applied"):
        return f" (tiling cannot lower it: {t['reason']}; untiled {t['arena_untiled_bytes']} " \
               f"B, {bound})"
    return (f" (tiled {t.get('layout', t['patches'])} over {t['layers']} layers to "
            f"{t['split']}: "
            f"{t['arena_bytes']} B, the smallest arena of every split x grid tried; untiled "
            f"{t['arena_untiled_bytes']} B, {bound}; "
            "a smaller arena needs a smaller input or a narrower network)")


def render(t: dict[str, Any] | None) -> str:
    """The tiling lines of plan.txt (empty when the plan was not tiled nor asked to be)."""
    if not t:
        return ""
    if not t.get("applied"):
        return f"tiling: not applied ({t['reason']})\n"
    layout = t.get("layout", t["patches"])
    how = f" ({layout})" if layout != t["patches"] else ""
    lines = [f"tiling: {t['patches']} patches{how} over {t['layers']} layers, "
             f"{t['first_step']} .. "
             f"{t['split']} (split after {t['split']}), halo {t['halo_px']} px; arena "
             f"{t['arena_untiled_bytes']} B untiled -> {t['arena_bytes']} B tiled "
             f"({t['ratio_to_lower_bound']}x the untiled liveness lower bound "
             f"{t['lower_bound_untiled_bytes']} B); extra MACs {t['extra_macs']} "
             f"({t['extra_macs_pct']} % of the model's conv MACs {t['model_macs']}); "
             f"modelled latency {t.get('latency_model', '?')}x untiled; "
             f"chosen: {t['chosen_by']}"]
    if len(t.get("candidates", [])) > 1:
        lines.append("tiling candidates (no other has both less arena and a lower "
                     "modelled latency):")
        lines.append("  patches  layers      arena B   extra MACs  extra %  latency  split"
                     "  (layout)")
        lines += [f"  {c['patches']:>7}  {c['layers']:>6}  {c['arena_bytes']:>11}  "
                  f"{c['extra_macs']:>11}  {c['extra_macs_pct']:>7}  "
                  f"{c.get('latency_model', 0):>7.3f}  {c['split']}"
                  + (f"  ({c['layout']})" if c.get("layout", c["patches"]) != c["patches"]
                     else "")
                  for c in t["candidates"]]
    return "\n".join(lines) + "\n"
