"""``edgesmith plan``: print the C runtime's memory plan of a build."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from edgesmith.pipeline.plan import plans

from .app import app, out_console


@app.command()
def plan(
    path: Path = typer.Argument(..., help="a build folder (--out of `edgesmith build`) or one "
                                          "generated C folder (BUILD/targets/c-int8)"),
    as_json: bool = typer.Option(False, "--json", help="print [{target, folder, arena_bytes, "
                                                       "lower_bound_bytes, tiling, "
                                                       "input_arenas, plan}] as JSON; "
                                                       "input_arenas (null unless an int8 "
                                                       "build with float input could save): "
                                                       "the untiled arena by C option "
                                                       "input; tiling (null when untiled): "
                                                       "grid, layout, row_bounds, "
                                                       "col_bounds, halo_px, split, "
                                                       "arena_untiled_bytes, "
                                                       "lower_bound_untiled_bytes, "
                                                       "extra_macs, latency_model, "
                                                       "candidates"),
) -> None:
    """Draw each C target's arena plan: every buffer's offset, size and lifetime, then one
    row per step (as TFLite Micro's PrintMemoryPlan does). A tiled build (C option
    `tiling`, or budgets.arena_kb missed untiled) first states its patch layout (grid,
    stripes or uneven cut), split, halo, arena tiled vs the untiled liveness bound, extra
    MACs, modelled latency and the candidates weighed. An int8 build with float input (the
    default) states the untiled arena under each C option `input` where another would
    lower it.

    Example: edgesmith plan build/demo
    """
    found = plans(path)
    if as_json:
        out_console.print_json(json.dumps([p.summary() for p in found]))
        return
    for p in found:
        out_console.print(f"[bold]{p.name}[/]  {p.folder}", highlight=False)
        out_console.print(p.text, markup=False, highlight=False, soft_wrap=True)
