"""``edgesmith profiles list|show|validate``."""

from __future__ import annotations

import json

import typer
import yaml
from rich.table import Table

from edgesmith import profiles as prof
from edgesmith.pipeline.stages import resolve_targets

from .app import app, out_console

profiles_app = typer.Typer(no_args_is_help=True, help="List, show and validate device profiles.")
app.add_typer(profiles_app, name="profiles")


@profiles_app.command("list")
def list_(as_json: bool = typer.Option(False, "--json", help="print JSON")) -> None:
    """The bundled profiles (pass a name to --profile, or copy one and edit it)."""
    loaded = [prof.load(name) for name in prof.bundled_names()]
    if as_json:
        out_console.print_json(json.dumps([
            {"name": p.name, "device": p.device.name, "arch": p.device.arch,
             "targets": [t.name for t in p.targets]} for p in loaded]))
        return
    table = Table(title="bundled profiles")
    for col in ("name", "arch", "targets", "description"):
        table.add_column(col, overflow="fold")
    for p in loaded:
        table.add_row(p.name, p.device.arch, ", ".join(t.name for t in p.targets),
                      p.description)
    out_console.print(table)


@profiles_app.command()
def show(
    name: str = typer.Argument(..., help="bundled name or YAML file"),
    as_json: bool = typer.Option(False, "--json", help="print JSON instead of YAML"),
) -> None:
    """Print a profile fully resolved: `extends:` merged and every default filled in."""
    p = prof.load(name)
    data = p.model_dump(mode="json")
    if as_json:
        out_console.print_json(json.dumps(data))
    else:
        out_console.print(yaml.safe_dump(data, sort_keys=False), end="", markup=False)


@profiles_app.command()
def validate(
    file: str = typer.Argument(..., help="profile YAML file (or bundled name)"),
    as_json: bool = typer.Option(False, "--json", help="print JSON"),
) -> None:
    """Check a profile: YAML syntax, schema, and each target's format options.
    Errors print as FILE:LINE: what is wrong, what is expected (exit 2)."""
    path = prof.resolve_path(file)
    p = prof.load(path)
    resolve_targets(p, None, str(path))
    if as_json:
        out_console.print_json(json.dumps({"file": str(path), "valid": True, "name": p.name,
                                           "targets": [t.name for t in p.targets]}))
    else:
        out_console.print(f"{path}: ok ({p.name}: {', '.join(t.name for t in p.targets)})")
