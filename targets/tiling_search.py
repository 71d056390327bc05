"""Which leading segment and patch grid to tile (tiling.py builds them): the pass.

Forced by the C target's ``tiling: {patches: N, split: S}``, or, with ``tiling: auto`` or an
arena budget the untiled plan misses, a search over every closed segment end x grid
2x2..8x8: with a budget, the candidate that fits with the fewest extra MACs; with none, the
smallest arena within AUTO_EXTRA of the model's MACs. A candidate that does not lower the
arena is not taken. The plan's ``tiling`` dict says what was done, and why, for
``edgesmith plan`` (tiling.render) and a budget miss's message (tiling.budget_note).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from edgesmith.errors import UsageError

from .graph import Graph, Step
from .planner import Plan
from .planner import plan as make_plan
from .tiling import (
    TiledStep,
    TilingForce,
    TilingOption,
    build_tiled,
    conv_params,
    find_segment,
    halo,
    macs,
)

GRIDS = tuple(range(2, 9))
AUTO_EXTRA = 0.15  # auto (no budget): extra MACs allowed, as a share of the model's


@dataclass(frozen=True)
class Candidate:
    layers: int
    grid: int
    graph: Graph
    step: TiledStep
    plan: Plan
    extra_macs: int

    def figures(self, model_macs: int) -> dict[str, Any]:
        return {"split": self.step.layers[-1].name, "layers": self.layers,
                "patches": f"{self.grid}x{self.grid}", "arena_bytes": self.plan.arena_bytes,
                "extra_macs": self.extra_macs,
                "extra_macs_pct": round(100.0 * self.extra_macs / model_macs, 2)
                if model_macs else 0.0}


def _candidate(g: Graph, start: int, seg: list[Step], grid: int,
               alignment: int) -> Candidate | None:
    built = build_tiled(g, start, seg, grid, alignment)
    if built is None:
        return None
    g2, st = built
    extra = sum(macs(p) for pa in st.patches for p in pa.params if p is not None) - sum(
        macs(p) for s in seg if (p := conv_params(s)) is not None)
    return Candidate(len(seg), grid, g2, st, make_plan(g2, alignment=alignment), extra)


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


def candidates(g: Graph, start: int, seg: list[Step], ends: list[int],
               alignment: int) -> list[Candidate]:
    """Every closed segment end x grid (at least two output rows and columns a patch)."""
    out = []
    for k in ends:
        _, _, oh, ow = g.tensors[seg[k - 1].outputs[0]].shape
        for n in GRIDS:
            if 2 * n <= min(oh, ow) and (c := _candidate(g, start, seg[:k], n, alignment)):
                out.append(c)
    return out


def pareto(cands: list[Candidate]) -> list[Candidate]:
    """The candidates no other beats on both arena and extra MACs, by arena."""
    front, best = [], None
    for c in sorted(cands, key=lambda c: (c.plan.arena_bytes, c.extra_macs)):
        if best is None or c.extra_macs < best:
            front.append(c)
            best = c.extra_macs
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
        best = _candidate(g, start, seg[:k], option.patches, alignment) \
            if option.patches <= min(oh, ow) else None
        if best is None:
            raise UsageError(
                f"tiling patches {option.patches} do not fit the split's output {oh}x{ow}",
                where="options.tiling.patches", fix="pick fewer patches or an earlier split")
        return _finish(g, p, best, budget_bytes, "forced", [best])
    cands = [c for c in candidates(g, start, seg, ends, alignment)
             if c.plan.arena_bytes < p.arena_bytes]
    if not cands:
        p.tiling = {"applied": False, "reason": "no patch grid over the leading segment "
                    "lowers the arena" if seg else "the network starts with no conv",
                    "arena_untiled_bytes": p.arena_bytes,
                    "lower_bound_untiled_bytes": p.lower_bound_bytes,
                    "budget_bytes": budget_bytes}
        return g, p
    return _finish(g, p, choose(cands, budget_bytes, model_macs(g)), budget_bytes,
                   "budget" if budget_bytes is not None else "auto", cands)


def choose(cands: list[Candidate], budget: int | None, total_macs: int) -> Candidate:
    """With a budget: the fewest extra MACs that fit it, else the smallest arena. Without:
    the smallest arena within AUTO_EXTRA extra MACs, else the fewest extra MACs."""
    if budget is not None:
        fits = [c for c in cands if c.plan.arena_bytes <= budget]
        return (min(fits, key=lambda c: (c.extra_macs, c.plan.arena_bytes)) if fits else
                min(cands, key=lambda c: (c.plan.arena_bytes, c.extra_macs)))
    cheap = [c for c in cands if c.extra_macs <= AUTO_EXTRA * total_macs]
    return (min(cheap, key=lambda c: (c.plan.arena_bytes, c.extra_macs)) if cheap else
            min(cands, key=lambda c: (c.extra_macs, c.plan.arena_bytes)))


def _finish(g: Graph, p: Plan, c: Candidate, budget: int | None, why: str,
            cands: list[Candidate]) -> tuple[Graph, Plan]:
    ps = [q for q in (conv_params(s) for s in c.step.layers) if q is not None]
    total = model_macs(g)
    c.plan.tiling = {
        "applied": True, "chosen_by": why, "first_step": c.step.layers[0].name,
        "grid": [c.grid, c.grid],
        "halo_px": halo(ps), "arena_untiled_bytes": p.arena_bytes,
        "lower_bound_untiled_bytes": p.lower_bound_bytes,
        "ratio_to_lower_bound": round(c.plan.arena_bytes / p.lower_bound_bytes, 4)
        if p.lower_bound_bytes else None,
        "patch_buffers_bytes": c.step.scratch, "budget_bytes": budget,
        "chain_macs": sum(macs(q) for q in ps), "model_macs": total,
        **c.figures(total),
        "candidates": [x.figures(total) for x in pareto(cands)]}
    return c.graph, c.plan
