"""``edgesmith inspect``: the op-compat table of a model for a profile's targets."""

from __future__ import annotations

import json

import typer
from rich.table import Table

from edgesmith.pipeline.inspect import inspect as run_inspect

from .app import app, out_console
from .build import DATA_HELP, MODEL_HELP, PROFILE_HELP

_STYLE = {"supported": "green", "lowered": "yellow", "unsupported": "bold red"}


@app.command()
def inspect(
    model: str = typer.Argument(..., help=MODEL_HELP),
    profile: str = typer.Option("host", "--profile", "-p", help=PROFILE_HELP),
    data: str | None = typer.Option(
        None, "--data", "-d",
        help=DATA_HELP + " (sets the input shape; default: an .onnx's declared input, "
             "else the digits' 1x8x8)"),
    arch: str = typer.Option(None, help="callable building the architecture of a state dict"),
    trust_pickle: bool = typer.Option(False, help="allow arbitrary pickles in .pt (runs code!)"),
    opset: int = typer.Option(None, help="ONNX opset of the torch export (17-20; default: 17, "
                                         "or the newer one an op needs)"),
    all_nodes: bool = typer.Option(False, "--all", help="list every node, not only problems"),
    as_json: bool = typer.Option(False, "--json", help="print the full report as JSON"),
) -> None:
    """Which nodes each target of the profile supports, lowers or cannot express.

    Example: edgesmith inspect examples/digits/model.py:build --profile cortex-m7
    """
    report = run_inspect(model, profile, data=data, arch=arch, trust_pickle=trust_pickle,
                         opset=opset)
    if as_json:
        out_console.print_json(json.dumps(report))
        return
    targets = report["targets"]
    table = Table(title=f"op compat: {model} x {report['profile']}")
    for col in ("node", "op", "attributes", *targets):
        table.add_column(col, overflow="fold")
    shown = 0
    for row in report["rows"]:
        if not all_nodes and all(s == "supported" for s in row["status"].values()):
            continue
        shown += 1
        attrs = " ".join(f"{k}={v}" for k, v in row["attrs"].items())
        cells = []
        for t in targets:
            status, hint = row["status"][t], row["hints"][t]
            cells.append(f"[{_STYLE[status]}]{status}[/]" + (f"\n[dim]{hint}[/]" if hint else ""))
        table.add_row(row["node"], row["op_type"], attrs, *cells)
    if shown:
        out_console.print(table)
    counts = "; ".join(f"{t}: {c['supported']} supported, {c['lowered']} lowered, "
                       f"{c['unsupported']} unsupported" for t, c in report["counts"].items())
    out_console.print(f"{len(report['rows'])} nodes at opset {report['opset']}. {counts}"
                      + ("" if all_nodes else "  (--all lists every node)"))
    for e in report.get("mcu", []):
        out_console.print(_mcu_line(e))


def _mcu_line(e: dict) -> str:
    """One target's flash / RAM estimate, against its budgets where the profile sets them."""
    sec = e["mcu_sections"]

    def vs(kb: float, budget: float | None) -> str:
        return f" (budget {budget:g} KB{', over' if budget is not None and kb > budget else ''})" \
            if budget is not None else ""

    flash_kb, arena_kb = e["flash_bytes"] / 1024, sec["arena"] / 1024
    return (f"{e['target']} estimate ({e['cc']}): flash {flash_kb:.1f} KB"
            f"{vs(flash_kb, e['model_kb'])} = code {sec['text'] / 1024:.1f} + const "
            f"{sec['rodata'] / 1024:.1f} + data {sec['data'] / 1024:.1f}; RAM "
            f"{e['ram_bytes'] / 1024:.1f} KB = arena {arena_kb:.1f}{vs(arena_kb, e['arena_kb'])}"
            f" + bss {sec['bss'] / 1024:.1f} + data {sec['data'] / 1024:.1f} + stack "
            f"{sec['stack'] / 1024:.1f}")
