"""``edgesmith cache info|clear``."""

from __future__ import annotations

import json

import typer

from edgesmith.pipeline import cache

from .app import app, out_console

cache_app = typer.Typer(no_args_is_help=True,
                        help="The stage cache (EDGESMITH_CACHE, default ~/.cache/edgesmith).")
app.add_typer(cache_app, name="cache")


@cache_app.command()
def info(as_json: bool = typer.Option(False, "--json", help="print JSON")) -> None:
    """Where the cache is, how many entries it holds and their size."""
    doc = cache.info()
    if as_json:
        out_console.print_json(json.dumps(doc))
        return
    out_console.print(f"{doc['path']}: {doc['entries']} entries, {doc['bytes'] / 1e6:.1f} MB")
    for kind, k in doc["kinds"].items():
        out_console.print(f"  {kind}: {k['entries']} entries, {k['bytes'] / 1e6:.1f} MB")


@cache_app.command()
def clear() -> None:
    """Remove every cached stage result (builds then recompute everything)."""
    out_console.print(f"removed {cache.clear()} entries from {cache.root()}")
