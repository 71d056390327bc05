"""Patch-based (tiled) execution of a network's first convolutions, after MCUNetV2.

The early high-resolution layers of a CNN hold the largest activations, and the
tensor-level plan (``planner.plan``) can go no lower than the bytes live at its worst
step. Running a chain of the first convolutions on spatial patches instead, each patch
with the halo its receptive field needs, keeps only one patch of each intermediate tensor
alive; the chain's input and its full-size output stay in the arena and later layers run
per layer as before. The price is recomputed halo pixels: extra MACs, reported.

The pass works on a lowered graph: it finds the chain (one-call steps whose kernel takes
es_conv_params, each reading only the previous one's output: conv, depthwise and their
fused Relu/Clip, fp32 or int8), computes every patch's window through it (kernel, stride,
padding, dilation), plans the per-patch buffers with the planner's own placement, and
replaces the chain by one ``TiledStep``. Each patch copies its input window into a patch
buffer and runs the unchanged kernels on it with the patch's geometry: the window holds
real pixels only, and a border patch keeps the layer's padding on the sides it shares
with the image (PT/PL, and the kernel's implied bottom/right padding), so the result is
the untiled one.

Which chain and grid: forced by the C target's ``tiling: {patches: N, split: S}``, or,
with ``tiling: auto`` or an arena budget the untiled plan misses, the candidate (chain
length x grid 2x2..4x4) that fits the budget with the fewest extra MACs, else the
smallest arena. A candidate that does not lower the arena is not taken.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from edgesmith.errors import UsageError

from .graph import Call, Graph, Ref, Step
from .planner import Interval, Plan, align, place
from .planner import plan as make_plan

CONV_KERNELS = frozenset({
    "es_conv2d_f32", "es_conv2d_f32_gemm", "es_dwconv2d_f32", "es_conv2d_i8",
    "es_conv2d_i8_fast", "es_conv2d_i8_gemm", "es_conv2d_i8_dot", "es_conv2d_i8_cl",
    "es_dwconv2d_i8_hwc", "es_conv2d_i8_mcu"})
GRIDS = (2, 3, 4)
SLACK = 64  # readable bytes after each patch buffer (quad planes, vector overreads)


class TilingForce(BaseModel):
    """``tiling: {patches: N, split: S}``: an N x N grid over the chain that ends at step S
    (its ONNX node name, or its index in the per-layer plan `edgesmith plan` draws)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    patches: int = Field(..., ge=1, le=16, description="patches per side (N x N)")
    split: int | str = Field(..., description="last tiled step: node name or step index")


TilingOption = Literal["off", "auto"] | TilingForce | None


@dataclass(frozen=True)
class Window:
    """One axis of one layer on one patch: the input rows it reads [lo, hi), the output
    rows it writes [olo, ohi), and the padding it keeps before the window."""

    lo: int
    hi: int
    olo: int
    ohi: int
    pad: int


@dataclass
class Patch:
    row: int
    col: int
    params: list[dict]  # es_conv_params of each layer on this patch
    rows: list[Window]
    cols: list[Window]


@dataclass
class TiledStep(Step):
    """The chain run patch by patch: one step for the planner and the hooks; codegen
    writes its patches (codegen._tiled_case)."""

    layers: list[Step] = field(default_factory=list)  # the chain's steps, per layer
    patches: list[Patch] = field(default_factory=list)
    buffers: list[tuple[int, int]] = field(default_factory=list)  # (offset, bytes) per buf
    kernel_scratch: list[tuple[int, int]] = field(default_factory=list)  # per layer
    elem: list[int] = field(default_factory=list)  # element bytes of each buffer
    channels: list[int] = field(default_factory=list)  # channels of each buffer
    ctypes: list[str] = field(default_factory=list)  # C element type of each buffer
    full_hw: list[tuple[int, int]] = field(default_factory=list)  # (H, W) of each tensor


# -- the chain -------------------------------------------------------------------------------
def _conv_params(st: Step) -> dict | None:
    if len(st.calls) != 1 or st.calls[0].fn not in CONV_KERNELS:
        return None
    p = st.calls[0].args[-1]
    if not isinstance(p, dict) or p.get("__struct__") != "es_conv_params":
        return None
    refs = [a for a in st.calls[0].args if isinstance(a, Ref)]
    if any(r.offset for r in refs) or len(st.inputs) != 1 or len(st.outputs) != 1:
        return None
    return p


def find_chain(g: Graph) -> tuple[int, list[Step]]:
    """(index of the first step, the steps) of the longest conv chain at the start: the
    first conv step, then every next step that is a conv reading only the one before,
    whose output nothing else reads. Quad planes may pass inside the chain, not across
    its ends (its input and output stay CHW)."""
    readers: dict[str, int] = {}
    for st in g.steps:
        for t in st.inputs:
            readers[t] = readers.get(t, 0) + 1
    start = next((i for i, st in enumerate(g.steps) if _conv_params(st) is not None), None)
    if start is None or _conv_params(g.steps[start]).get("x_quads"):
        return 0, []
    chain = [g.steps[start]]
    for st in g.steps[start + 1:]:
        prev = chain[-1]
        p = _conv_params(st)
        out = prev.outputs[0]
        if (p is None or st.inputs[0] != out or readers.get(out) != 1
                or g.tensors[out].kind != "act"):
            break
        chain.append(st)
    while chain and _conv_params(chain[-1]).get("y_quads"):
        chain.pop()  # the last output is written into the full tensor as CHW
    return start, chain


# -- geometry --------------------------------------------------------------------------------
def _back(olo: int, ohi: int, n_in: int, s: int, pad: int, k: int, d: int) -> Window:
    """The input rows output rows [olo, ohi) read, clipped to the tensor: what is cut off
    is the layer's padding, which the kernel makes itself."""
    lo, hi = olo * s - pad, (ohi - 1) * s - pad + (k - 1) * d + 1
    clo, chi = max(lo, 0), min(hi, n_in)
    return Window(clo, chi, olo, ohi, clo - lo)


def _split(n: int, parts: int) -> list[tuple[int, int]]:
    return [(n * i // parts, n * (i + 1) // parts) for i in range(parts)]


def patch_windows(ps: list[dict], grid: int) -> list[Patch]:
    """Every patch's windows and per-layer params, from the last layer's output grid back
    to the chain's input."""
    last = ps[-1]
    out = []
    for r, (r0, r1) in enumerate(_split(last["OH"], grid)):
        for c, (c0, c1) in enumerate(_split(last["OW"], grid)):
            rows, cols, params = [], [], []
            a0, a1, b0, b1 = r0, r1, c0, c1  # output rows, cols of the layer below
            for p in reversed(ps):
                wr = _back(a0, a1, p["H"], p["SH"], p["PT"], p["KH"], p["DH"])
                wc = _back(b0, b1, p["W"], p["SW"], p["PL"], p["KW"], p["DW"])
                rows.insert(0, wr)
                cols.insert(0, wc)
                params.insert(0, {**p, "H": wr.hi - wr.lo, "W": wc.hi - wc.lo, "OH": a1 - a0,
                                  "OW": b1 - b0, "PT": wr.pad, "PL": wc.pad})
                a0, a1, b0, b1 = wr.lo, wr.hi, wc.lo, wc.hi
            out.append(Patch(r, c, params, rows, cols))
    return out


def macs(p: dict) -> int:
    return int(p["M"]) * int(p["C"]) // int(p["group"]) * p["KH"] * p["KW"] * p["OH"] * p["OW"]


def halo(ps: list[dict]) -> int:
    """Input rows two neighbouring patches both read: the chain's receptive field less its
    stride."""
    rf, jump = 1, 1
    for p in ps:
        rf += (p["KH"] - 1) * p["DH"] * jump
        jump *= p["SH"]
    return rf - jump


# -- one candidate -----------------------------------------------------------------------------
def _buffer_bytes(g: Graph, chain: list[Step], patches: list[Patch]) -> list[int]:
    """Bytes of each patch buffer (the input window, then each layer's output), the most
    any patch needs, plus SLACK."""
    tens = [chain[0].inputs[0]] + [st.outputs[0] for st in chain]
    sizes = []
    for j, t in enumerate(tens):
        tt = g.tensors[t]
        elem = tt.nbytes // max(tt.size, 1)
        k = max(j - 1, 0)  # buffer j is layer j-1's output (j >= 1) or layer 0's input
        most = max((pa.rows[k].ohi - pa.rows[k].olo) * (pa.cols[k].ohi - pa.cols[k].olo)
                   if j else (pa.rows[0].hi - pa.rows[0].lo) * (pa.cols[0].hi - pa.cols[0].lo)
                   for pa in patches)
        sizes.append(tt.shape[1] * most * elem + SLACK)
    return sizes


def build_tiled(g: Graph, start: int, chain: list[Step], grid: int,
                alignment: int) -> tuple[Graph, TiledStep]:
    """``g`` with ``chain`` (steps ``start``...) replaced by one TiledStep on a grid x grid
    patch grid; the chain's intermediate tensors leave the arena for patch buffers."""
    ps = [st.calls[0].args[-1] for st in chain]
    patches = patch_windows(ps, grid)
    sizes = _buffer_bytes(g, chain, patches)
    ivs = [Interval(f"buf{j}", j, j + 1, align(s, alignment)) for j, s in enumerate(sizes)]
    scratch = []
    for k, st in enumerate(chain):
        kern = st.calls[0].kernel
        need = max((kern.scratch(pa.params[k]) for pa in patches), default=0) \
            if kern is not None and kern.scratch is not None else 0
        scratch.append(need)
        if need:
            ivs.append(Interval(f"scratch{k}", k + 1, k + 1, align(need, alignment)))
    offsets, total, _ = place(ivs)
    tens = [chain[0].inputs[0]] + [st.outputs[0] for st in chain]
    tiled = TiledStep(
        name=f"{chain[0].name}..{chain[-1].name}" if len(chain) > 1 else chain[0].name,
        op=f"Tiled{grid}x{grid}", inputs=[tens[0]], outputs=[tens[-1]],
        # the layers' kernels, for the sources codegen copies; kernel=None: the patch
        # scratch is checked per patch (codegen._tile_checks), not against the full size
        calls=[Call(st.calls[0].fn, st.calls[0].args) for st in chain],
        scratch=total, layers=list(chain), patches=patches,
        buffers=[(offsets[f"buf{j}"], s) for j, s in enumerate(sizes)],
        kernel_scratch=[(offsets.get(f"scratch{k}", 0), s) for k, s in enumerate(scratch)],
        elem=[g.tensors[t].nbytes // max(g.tensors[t].size, 1) for t in tens],
        channels=[g.tensors[t].shape[1] for t in tens],
        ctypes=[g.tensors[t].ctype for t in tens],
        full_hw=[tuple(g.tensors[t].shape[2:4]) for t in tens])
    tensors = {k: v for k, v in g.tensors.items() if k not in tens[1:-1]}
    steps = g.steps[:start] + [tiled] + g.steps[start + len(chain):]
    return replace(g, tensors=tensors, steps=steps), tiled


@dataclass(frozen=True)
class Candidate:
    layers: int
    grid: int
    graph: Graph
    step: TiledStep
    plan: Plan
    extra_macs: int


def _candidate(g: Graph, start: int, chain: list[Step], grid: int,
               alignment: int) -> Candidate:
    g2, st = build_tiled(g, start, chain, grid, alignment)
    extra = sum(macs(p) for pa in st.patches for p in pa.params) - sum(
        macs(s.calls[0].args[-1]) for s in chain)
    return Candidate(len(chain), grid, g2, st, make_plan(g2, alignment=alignment), extra)


def _resolve_split(g: Graph, start: int, chain: list[Step], split: int | str) -> int:
    """Layers of the chain up to the forced split (a node name or a step index)."""
    for k, st in enumerate(chain):
        if split == st.name or split == start + k:
            return k + 1
    names = ", ".join(f"{start + k} ({st.name})" for k, st in enumerate(chain)) or "none"
    raise UsageError(
        f"tiling split {split!r} is not a step of the network's leading conv chain",
        where="options.tiling.split",
        fix=f"name one of the steps that can be tiled: {names}; `edgesmith plan` lists them")


def model_macs(g: Graph) -> int:
    return sum(macs(p) for st in g.steps if (p := _conv_params(st)) is not None)


# -- the pass ----------------------------------------------------------------------------------
def apply(g: Graph, p: Plan, option: TilingOption = None, budget_bytes: int | None = None,
          alignment: int = 64) -> tuple[Graph, Plan]:
    """(graph, plan), tiled where asked or needed; the plan's ``tiling`` says what was
    done (or why not) and ``render_plan`` draws it."""
    if option == "off" or (option is None and (budget_bytes is None
                                                or p.arena_bytes <= budget_bytes)):
        return g, p
    start, chain = find_chain(g)
    if isinstance(option, TilingForce):
        k = _resolve_split(g, start, chain, option.split)
        last = chain[k - 1].calls[0].args[-1]
        if option.patches > min(last["OH"], last["OW"]):
            raise UsageError(
                f"tiling patches {option.patches} exceeds the split's output "
                f"{last['OH']}x{last['OW']}", where="options.tiling.patches",
                fix="pick fewer patches or an earlier split")
        best = _candidate(g, start, chain[:k], option.patches, alignment)
        return _finish(g, p, best, budget_bytes, "forced")
    cands = [_candidate(g, start, chain[:k], n, alignment)
             for k in range(1, len(chain) + 1) for n in GRIDS
             if n <= min(chain[k - 1].calls[0].args[-1]["OH"],
                         chain[k - 1].calls[0].args[-1]["OW"])]
    cands = [c for c in cands if c.plan.arena_bytes < p.arena_bytes]
    if not cands:
        p.tiling = {"applied": False, "reason": "no patch grid over the leading conv chain "
                    "lowers the arena" if chain else "the network starts with no conv chain",
                    "arena_untiled_bytes": p.arena_bytes}
        return g, p
    fits = [c for c in cands if budget_bytes is not None and c.plan.arena_bytes <= budget_bytes]
    best = (min(fits, key=lambda c: (c.extra_macs, c.plan.arena_bytes)) if fits else
            min(cands, key=lambda c: (c.plan.arena_bytes, c.extra_macs)))
    return _finish(g, p, best, budget_bytes, "budget" if budget_bytes is not None else "auto")


def _finish(g: Graph, p: Plan, c: Candidate, budget: int | None, why: str) -> tuple[Graph, Plan]:
    ps = [s.calls[0].args[-1] for s in c.step.layers]
    chain_macs = sum(macs(q) for q in ps)
    total = model_macs(g)
    c.plan.tiling = {
        "applied": True, "chosen_by": why, "first_step": c.step.layers[0].name,
        "split": c.step.layers[-1].name, "layers": c.layers, "patches": f"{c.grid}x{c.grid}",
        "halo_px": halo(ps), "arena_untiled_bytes": p.arena_bytes,
        "lower_bound_untiled_bytes": p.lower_bound_bytes, "arena_bytes": c.plan.arena_bytes,
        "patch_buffers_bytes": c.step.scratch, "budget_bytes": budget,
        "chain_macs": chain_macs, "extra_macs": c.extra_macs, "model_macs": total,
        "extra_macs_pct": round(100.0 * c.extra_macs / total, 2) if total else 0.0}
    return c.graph, c.plan


def render(t: dict[str, Any] | None) -> str:
    """The tiling lines of plan.txt (empty when the plan was not tiled nor asked to be)."""
    if not t:
        return ""
    if not t.get("applied"):
        return f"tiling: not applied ({t['reason']})\n"
    return (f"tiling: {t['patches']} patches over {t['layers']} layers, {t['first_step']} .. "
            f"{t['split']} (split after {t['split']}), halo {t['halo_px']} px; arena "
            f"{t['arena_untiled_bytes']} B untiled -> {t['arena_bytes']} B tiled (untiled "
            f"liveness lower bound {t['lower_bound_untiled_bytes']} B); extra MACs "
            f"{t['extra_macs']} ({t['extra_macs_pct']} % of the model's conv MACs "
            f"{t['model_macs']}); chosen: {t['chosen_by']}\n")


def call_args(st: TiledStep, k: int) -> Call:
    """Layer ``k``'s call as lowered (its Refs name the full tensors; codegen redirects
    them to the patch buffers)."""
    return st.layers[k].calls[0]
