"""Which leading segment and patch layout to tile (tiling.py builds them): the pass.

Forced by the C target's ``tiling: {patches: N, split: S}`` (``cols: M`` for N x M), or,
with ``tiling: auto`` or an arena budget the untiled plan misses, a search over every closed
segment end x layout: square grids 2x2..8x8, full-width stripes 2x1..8x1 (rows keep their
whole width, halo only vertical) and two columns cut unevenly where the latency model says
the halo is cheapest. Each candidate is scored by its arena AND a latency model
(tiling_cost.py: extra MACs weighted by the kernels' column efficiency and per-call
set-up), not by extra MACs alone: with a budget, the fitting candidate the model deems
fastest; with none, the smallest arena within AUTO_EXTRA of the untiled modelled latency.
A candidate that does not lower the arena is not taken. The plan's ``tiling`` dict says
what was done, and why, for ``edgesmith plan`` (tiling.render) and a budget miss's message
(tiling.budget_note).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from edgesmith.errors import UsageError

from .graph import Graph, Step
from .planner import Plan
from .planner import plan as make_plan
from .tiling import (
    Layout,
    TiledStep,
    TilingForce,
    TilingOption,
    build_tiled,
    conv_params,
    find_segment,
    halo,
    macs,
)
from .tiling_cost import latency_ratio, model_cost

GRIDS = tuple(range(2, 9))
AUTO_EXTRA = 0.15  # auto (no budget): modelled extra latency allowed, share of untiled


@dataclass(frozen=True)
class Candidate:
    layers: int
    layout: Layout
    graph: Graph
    step: TiledStep
    plan: Plan
    extra_macs: int
    latency: float  # modelled latency over untiled (tiling_cost.py)

    @property
    def grid(self) -> tuple[int, int]:
        return self.layout.shape

    def figures(self, model_macs: int) -> dict[str, Any]:
        return {"split": self.step.layers[-1].name, "layers": self.layers,
                "patches": "{}x{}".format(*self.grid), "layout": self.layout.describe(),
                "arena_bytes": self.plan.arena_bytes,
                "extra_macs": self.extra_macs,
                "extra_macs_pct": round(100.0 * self.extra_macs / model_macs, 2)
                if model_macs else 0.0,
                "latency_model": round(self.latency, 4)}


def _candidate(g: Graph, start: int, seg: list[Step], layout: Layout, alignment: int,
               untiled: float) -> Candidate | None:
    built = build_tiled(g, start, seg, layout, alignment)
    if built is None:
        return None
    g2, st = built
    extra = sum(macs(p) for pa in st.patches for p in pa.params if p is not None) - sum(
        macs(p) for s in seg if (p := conv_params(s)) is not None)
    return Candidate(len(seg), layout, g2, st, make_plan(g2, alignment=alignment), extra,
                     latency_ratio(g, seg, st, untiled))


def _resolve_split(start: int, seg: list[Step], ends: list[int], split: int | str) -> int:
    """Length of the segment up to the forced split (a node name or a step index)."""
    for k in ends:
        if split == seg[k - 1].name or split == start + k - 1:
            return k
    names = ", ".join(f"{start + k - 1} ({seg[k - 1].name})" for k in ends) or "none"
    raise UsageError(
        f"tiling split {split!r} is not a step where the network's leading segment of "
        "convs, residual adds and the input's quantize can end",
        where="options.tiling.split",
        fix=f"name one of the steps that can end a tiled segment: {names}; `edgesmith plan` "
            "lists them")


def model_macs(g: Graph) -> int:
    return sum(macs(p) for st in g.steps if (p := conv_params(st)) is not None)


def layouts(g: Graph, start: int, seg: list[Step], untiled: float) -> list[Layout]:
    """The layouts weighed for a segment (at least two output rows and columns a patch):
    square grids, full-width stripes, and per row count two columns cut where the latency
    model is lowest (one patch's rows can then be a whole number of 16-column blocks)."""
    _, _, oh, ow = g.tensors[seg[-1].outputs[0]].shape
    out = [Layout.even(oh, ow, n, n) for n in GRIDS if 2 * n <= min(oh, ow)]
    out += [Layout.even(oh, ow, n, 1) for n in GRIDS if 2 * n <= oh]
    if ow >= 8:
        cut = _cheapest_cut(g, start, seg, oh, ow, untiled)
        if cut is not None and cut != ow // 2:
            out += [Layout(Layout.even(oh, ow, n, 1).rows, (0, cut, ow))
                    for n in (1, *GRIDS) if 2 * n <= oh]
    return out


def _cheapest_cut(g: Graph, start: int, seg: list[Step], oh: int, ow: int,
                  untiled: float) -> int | None:
    """The column cut (a quarter to three quarters of the width) of two full-height
    patches that the latency model deems cheapest."""
    best: tuple[float, int] | None = None
    for cut in range(max(2, ow // 4), min(ow - 2, 3 * ow // 4) + 1):
        built = build_tiled(g, start, seg, Layout((0, oh), (0, cut, ow)), 64)
        if built is not None:
            cost = latency_ratio(g, seg, built[1], untiled)
            if best is None or cost < best[0]:
                best = (cost, cut)
    return best[1] if best else None


def candidates(g: Graph, start: int, seg: list[Step], ends: list[int],
               alignment: int) -> list[Candidate]:
    """Every closed segment end x layout."""
    untiled = model_cost(g)
    out = []
    for k in ends:
        for lay in layouts(g, start, seg[:k], untiled):
            if lay.shape != (1, 1) and (c := _candidate(g, start, seg[:k], lay, alignment,
                                                        untiled)):
                out.append(c)
    return out


def pareto(cands: list[Candidate]) -> list[Candidate]:
    """The candidates no other beats on both arena and modelled latency, by arena."""
    front, best = [], None
    for c in sorted(cands, key=lambda c: (c.plan.arena_bytes, c.latency, c.extra_macs)):
        if best is None or c.latency < best:
            front.append(c)
            best = c.latency
    return front


# -- the pass ----------------------------------------------------------------------------------
def apply(g: Graph, p: Plan, option: TilingOption = None, budget_bytes: int | None = None,
          alignment: int = 64) -> tuple[Graph, Plan]:
    """(graph, plan), tiled where asked or needed; the plan's ``tiling`` says what was
    done (or why not) and ``render_plan`` draws it."""
    if option == "off" or (option is None and (budget_bytes is None
                                                or p.arena_bytes <= budget_bytes)):
        return g, p
    start, seg, ends = find_segment(g)
    if isinstance(option, TilingForce):
        k = _resolve_split(start, seg, ends, option.split)
        _, _, oh, ow = g.tensors[seg[k - 1].outputs[0]].shape
        nr, nc = option.patches, option.cols or option.patches
        best = _candidate(g, start, seg[:k], Layout.even(oh, ow, nr, nc), alignment,
                          model_cost(g)) if nr <= oh and nc <= ow else None
        if best is None:
            raise UsageError(
                f"tiling patches {nr}x{nc} do not fit the split's output {oh}x{ow}",
                where="options.tiling.patches", fix="pick fewer patches or an earlier split")
        return finish(g, p, best, budget_bytes, "forced", [best])
    cands = [c for c in candidates(g, start, seg, ends, alignment)
             if c.plan.arena_bytes < p.arena_bytes]
    if not cands:
        p.tiling = {"applied": False, "reason": "no patch grid over the leading segment "
                    "lowers the arena" if seg else "the network starts with no conv",
                    "arena_untiled_bytes": p.arena_bytes,
                    "lower_bound_untiled_bytes": p.lower_bound_bytes,
                    "budget_bytes": budget_bytes}
        return g, p
    return finish(g, p, choose(cands, budget_bytes), budget_bytes,
                  "budget" if budget_bytes is not None else "auto", cands)


def choose(cands: list[Candidate], budget: int | None) -> Candidate:
    """With a budget: the fitting candidate the latency model deems fastest, else the
    smallest arena. Without: the smallest arena within AUTO_EXTRA modelled extra latency,
    else the fastest."""
    if budget is not None:
        fits = [c for c in cands if c.plan.arena_bytes <= budget]
        return (min(fits, key=lambda c: (c.latency, c.plan.arena_bytes)) if fits else
                min(cands, key=lambda c: (c.plan.arena_bytes, c.latency)))
    cheap = [c for c in cands if c.latency <= 1.0 + AUTO_EXTRA]
    return (min(cheap, key=lambda c: (c.plan.arena_bytes, c.latency)) if cheap else
            min(cands, key=lambda c: (c.latency, c.plan.arena_bytes)))


def finish(g: Graph, p: Plan, c: Candidate, budget: int | None, why: str,
           cands: list[Candidate]) -> tuple[Graph, Plan]:
    ps = [q for q in (conv_params(s) for s in c.step.layers) if q is not None]
    total = model_macs(g)
    c.plan.tiling = {
        "applied": True, "chosen_by": why, "first_step": c.step.layers[0].name,
        "grid": list(c.grid), "row_bounds": list(c.layout.rows),
        "col_bounds": list(c.layout.cols),
        "halo_px": halo(ps), "arena_untiled_bytes": p.arena_bytes,
        "lower_bound_untiled_bytes": p.lower_bound_bytes,
        "ratio_to_lower_bound": round(c.plan.arena_bytes / p.lower_bound_bytes, 4)
        if p.lower_bound_bytes else None,
        "patch_buffers_bytes": c.step.scratch, "budget_bytes": budget,
        "chain_macs": sum(macs(q) for q in ps), "model_macs": total,
        **c.figures(total),
        "candidates": [x.figures(total) for x in pareto(cands)]}
    return c.graph, c.plan
