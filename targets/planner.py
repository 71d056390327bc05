"""Static memory plan: every activation gets an offset in one arena, fixed at generation time.

Buffers live from the step that writes them to the last step that reads them (graph
outputs to the end, inputs from the start). Element-wise steps may write in place over an
input whose life ends there. Offsets come from four greedy placements (by size, by
conflicts, by end and by start of life); the smallest arena wins. The report puts the
arena next to the liveness lower bound (the most bytes ever live at once) and the naive
sum of all buffers.

The placement core (``place``) works on plain intervals, so it is tested on random
interval sets against a brute-force optimum.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from edgesmith.errors import ConversionError

from .graph import Graph
from .int8_input import arenas_note, quantizer


@dataclass(frozen=True)
class Interval:
    name: str
    start: int  # first step index that needs the buffer
    end: int  # last step index that needs it (inclusive)
    size: int  # bytes, already aligned
    # a buffer that shrinks: from step keep_from on only its first ``keep`` bytes stay live
    # (an input quantized over its own slot: the float input, then its int8 copy)
    keep: int = 0
    keep_from: int | None = None

    def overlaps(self, other: Interval) -> bool:
        return self.start <= other.end and other.start <= self.end

    def live_bytes(self, step: int) -> int:
        """Bytes live at ``step`` (0 outside the buffer's life)."""
        if not self.start <= step <= self.end:
            return 0
        return self.keep if self.keep_from is not None and step >= self.keep_from \
            else self.size

    def bytes_during(self, other: Interval) -> int:
        """The most bytes this buffer holds at any step ``other`` is live: all of them
        while its wide part overlaps ``other``, then only the kept prefix."""
        if not self.overlaps(other):
            return 0
        if self.keep_from is None or other.start < self.keep_from:
            return self.size
        return self.keep


@dataclass
class Plan:
    offsets: dict[str, int]  # tensor name -> byte offset in the arena
    arena_bytes: int
    lower_bound_bytes: int
    naive_bytes: int
    strategy: str
    alignment: int
    inplace: list[str] = field(default_factory=list)  # steps that write over their input
    # the placed buffers (an in-place group is one, named after its first tensor) and the
    # tensors each holds: what render_plan draws
    intervals: list[Interval] = field(default_factory=list)
    members: dict[str, list[str]] = field(default_factory=dict)
    # patch-based execution of the leading conv chain (tiling_search.apply), when asked or needed
    tiling: dict[str, object] | None = None
    # inputs whose int8 copy the plan puts over their own slot (Graph.consumed, where the
    # input's QuantizeLinear is a step of its own): a run overwrites them
    consumed: list[str] = field(default_factory=list)
    # an int8 build with the default float input: the untiled arena under each C option
    # `input` (int8_input.input_arenas), when another one would lower it
    input_arenas: dict[str, int] = field(default_factory=dict)

    @property
    def efficiency(self) -> float:
        return self.lower_bound_bytes / self.arena_bytes if self.arena_bytes else 1.0

    def figures(self) -> dict[str, object]:
        return {"arena_bytes": self.arena_bytes, "lower_bound_bytes": self.lower_bound_bytes,
                "naive_bytes": self.naive_bytes, "efficiency": round(self.efficiency, 4),
                "strategy": self.strategy, "alignment": self.alignment,
                "inplace_steps": len(self.inplace),
                **({"consumed_inputs": len(self.consumed)} if self.consumed else {}),
                **({"tiling": self.tiling} if self.tiling else {}),
                **({"input_arenas": self.input_arenas} if self.input_arenas else {})}


def align(n: int, a: int) -> int:
    return (n + a - 1) // a * a


# -- placement on intervals ---------------------------------------------------------------
def _lowest_fit(iv: Interval, placed: list[tuple[Interval, int]]) -> int:
    """Lowest offset where ``iv`` fits between the placed buffers it conflicts with
    (best fit: the smallest gap that holds it, else on top). A shrinking buffer needs
    different sizes against different neighbours, so it takes the lowest offset that
    clears each of them."""
    busy = sorted((off, off + p.bytes_during(iv), iv.bytes_during(p))
                  for p, off in placed if p.overlaps(iv))
    if any(need != iv.size for _, _, need in busy):
        return min(o for o in {0, *(hi for _, hi, _ in busy)}
                   if all(o + need <= lo or hi <= o for lo, hi, need in busy))
    best, best_gap, cur = None, None, 0
    for lo, hi, _ in busy:
        gap = lo - cur
        if gap >= iv.size and (best_gap is None or gap < best_gap):
            best, best_gap = cur, gap
        cur = max(cur, hi)
    return best if best is not None else cur


def place_in_order(order: Sequence[Interval]) -> tuple[dict[str, int], int]:
    placed: list[tuple[Interval, int]] = []
    for iv in order:
        placed.append((iv, _lowest_fit(iv, placed)))
    offsets = {iv.name: off for iv, off in placed}
    top = max((off + iv.size for iv, off in placed), default=0)
    return offsets, top


def place(intervals: Sequence[Interval]) -> tuple[dict[str, int], int, str]:
    """Best of four greedy orders; returns (offsets, arena, strategy). By size and by
    conflicts are the classic two; by end of life (then size) packs a chain of short-lived
    buffers next to one large scratch, which both miss on small models (digits INT8:
    11,392 B by size, 10,624 B by end, 10,560 B lower bound). Placement is quadratic in
    the buffer count, so four passes cost nothing next to code generation."""
    ivs = list(intervals)
    by_size = sorted(ivs, key=lambda i: (-i.size, i.start, i.name))
    conflicts = {i.name: sum(j.size for j in ivs if j is not i and j.overlaps(i)) for i in ivs}
    by_conf = sorted(ivs, key=lambda i: (-(conflicts[i.name] + i.size), -i.size, i.name))
    by_end = sorted(ivs, key=lambda i: (i.end, -i.size, i.name))
    by_start = sorted(ivs, key=lambda i: (i.start, -i.size, i.name))
    best = None
    for name, order in (("greedy_by_size", by_size), ("greedy_by_conflicts", by_conf),
                        ("greedy_by_end", by_end), ("greedy_by_start", by_start)):
        offsets, top = place_in_order(order)
        if best is None or top < best[1]:
            best = (offsets, top, name)
    return best


def lower_bound(intervals: Sequence[Interval]) -> int:
    """The most bytes live at one step (live bytes only grow where a buffer starts)."""
    points = {i.start for i in intervals}
    return max((sum(i.live_bytes(p) for i in intervals) for p in points), default=0)


def check(intervals: Sequence[Interval], offsets: dict[str, int]) -> None:
    """Raise ConversionError if two buffers live at the same time share a byte: a
    placement bug, caught before any C is written."""
    ivs = list(intervals)
    for a_i, a in enumerate(ivs):
        for b in ivs[a_i + 1:]:
            if a.overlaps(b):
                oa, ob = offsets[a.name], offsets[b.name]
                na, nb = a.bytes_during(b), b.bytes_during(a)
                if oa < ob + nb and ob < oa + na:
                    raise ConversionError(
                        f"memory plan: {a.name} [{oa}, {oa + na}) and {b.name} "
                        f"[{ob}, {ob + nb}) are live together and share bytes",
                        where=f"{a.name}, {b.name}", fix="report a bug in the planner")


# -- plan a graph --------------------------------------------------------------------------
def lifetimes(g: Graph) -> tuple[dict[str, int], dict[str, int]]:
    """(first, last) step of every activation: inputs from step 0, graph outputs to the
    end (one past the last step)."""
    nsteps = len(g.steps)
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    for name in g.inputs:
        first[name] = 0
        last[name] = 0
    for i, st in enumerate(g.steps):
        for t in (*st.outputs, *st.inputs):
            first.setdefault(t, i)
            last[t] = max(last.get(t, i), i)
    for name in g.outputs:
        first.setdefault(name, nsteps)
        last[name] = max(nsteps, last.get(name, nsteps))
    return first, last


def _inplace_groups(g: Graph, first: dict[str, int], last: dict[str, int]):
    """(tensor -> group root, root -> members, steps done in place): an element-wise
    step's output takes over its input's buffer when the input dies there, and so does
    the int8 copy of an input the graph may consume (``Graph.consumed``), written by its
    QuantizeLinear over the float input's own slot."""
    group = {t: t for t in first}
    members: dict[str, list[str]] = {t: [t] for t in first}
    done = []
    for i, st in enumerate(g.steps):
        if not st.inputs or not st.outputs:
            continue
        src, dst = group[st.inputs[0]], st.outputs[0]
        if st.inputs[0] in g.consumed:
            takes_over = quantizer(g, st.inputs[0]) is st
        elif st.inplace:
            t_src, t_dst = g.tensors[st.inputs[0]], g.tensors[dst]
            ends_here = max(last[m] for m in members[src]) == i
            takes_over = (ends_here and t_src.kind == "act" and t_dst.kind != "input"
                          and group[dst] == dst and t_dst.nbytes <= max(
                              g.tensors[m].nbytes for m in members[src])
                          and st.inputs.count(st.inputs[0]) == 1
                          and st.inputs[0] not in st.inputs[1:])
        else:
            continue
        if takes_over:
            group[dst] = src
            members[src].append(dst)
            del members[dst]
            done.append(st.name)
    return group, members, done


def plan(g: Graph, alignment: int = 64, inplace: bool = True) -> Plan:
    """Offsets for every activation tensor of ``g`` (views share their base tensor)."""
    first, last = lifetimes(g)
    if inplace:
        group, members, done_inplace = _inplace_groups(g, first, last)
    else:
        group, members, done_inplace = {t: t for t in first}, {t: [t] for t in first}, []

    def nbytes(ms: list[str]) -> int:
        return align(max(max(g.tensors[m].nbytes + g.tensors[m].slack for m in ms), 1),
                     alignment)

    ivs, consumed = [], []
    for root, ms in members.items():
        start, end = min(first[m] for m in ms), max(last[m] for m in ms)
        if root in g.consumed and len(ms) > 1:  # the float input, then its int8 copy
            ivs.append(Interval(root, start, end, nbytes(ms), keep=nbytes(ms[1:]),
                                keep_from=last[root] + 1))
            consumed.append(root)
        else:
            ivs.append(Interval(root, start, end, nbytes(ms)))
    for i, st in enumerate(g.steps):
        if st.scratch:
            ivs.append(Interval(f"__scratch_{i}", i, i, align(st.scratch, alignment)))
            members[f"__scratch_{i}"] = [f"scratch of {st.name}"]
    offsets, arena, strategy = place(ivs)
    check(ivs, offsets)
    full = {t: offsets[group[t]] for t in group}
    for i, st in enumerate(g.steps):
        if st.scratch:
            full[f"__scratch_{i}"] = offsets[f"__scratch_{i}"]
    return Plan(full, arena, lower_bound(ivs), sum(iv.size for iv in ivs), strategy, alignment,
                done_inplace, ivs, members, consumed=consumed)


# -- show the plan ---------------------------------------------------------------------------
_MARKS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"


def render_plan(p: Plan, g: Graph | None = None, width: int = 64) -> str:
    """The plan as text, after TFLite Micro's PrintMemoryPlan: a legend (each buffer's
    mark, offset, size, first and last step, the tensors it holds), then one row per step
    drawing the arena ``width`` columns wide, each live buffer as its mark over the bytes
    it occupies (``.`` free). A wasteful or wrong plan is visible at a glance."""
    ivs = sorted(p.intervals, key=lambda iv: (p.offsets.get(iv.name, 0), iv.start, iv.name))
    arena = max(p.arena_bytes, 1)
    head = [f"memory plan: {len(ivs)} buffers, arena {p.arena_bytes} B (liveness lower "
            f"bound {p.lower_bound_bytes} B, naive {p.naive_bytes} B), {p.strategy}, "
            f"aligned to {p.alignment} B; in place: {len(p.inplace)} steps",
            "", "mark  offset      size  steps      holds"]
    marks = {}
    for k, iv in enumerate(ivs):
        marks[iv.name] = _MARKS[k % len(_MARKS)]
        holds = ", ".join(p.members.get(iv.name, [iv.name]))
        shrinks = (f" (the first {iv.keep} B from step {iv.keep_from} on)"
                   if iv.keep_from is not None else "")
        head.append(f"{marks[iv.name]:>4}  {p.offsets.get(iv.name, 0):>6}  {iv.size:>8}  "
                    f"{iv.start:>4}-{iv.end:<4}  {holds}{shrinks}")
    nsteps = max((iv.end for iv in ivs), default=-1) + 1
    names = [st.name for st in g.steps] + ["(outputs)"] if g is not None else []
    head += ["", f"step  0{'-' * (width - 2)}{arena} B"]
    for step in range(nsteps):
        row = ["."] * width
        for iv in ivs:
            if iv.start <= step <= iv.end:
                lo = p.offsets.get(iv.name, 0) * width // arena
                hi = max(lo + 1, -(-(p.offsets.get(iv.name, 0) + iv.live_bytes(step)) * width
                                   // arena))
                for c in range(lo, min(hi, width)):
                    row[c] = marks[iv.name]
        label = f"  {names[step]}" if step < len(names) else ""
        head.append(f"{step:>4}  {''.join(row)}{label}")
    from .tiling import render as render_tiling

    hint = arenas_note(p.input_arenas)
    return render_tiling(p.tiling) + (f"{hint}\n" if hint else "") + \
        "\n".join(head) + "\n"
