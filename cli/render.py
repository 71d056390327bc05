"""rich renderings shared by the commands: progress events and result tables."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from rich import box
from rich.table import Table

from edgesmith.pipeline.events import Events
from edgesmith.pipeline.report import HEADER, target_rows

from .app import err_console


class RichEvents(Events):
    """Spinner per stage with elapsed time; a line per finished stage."""

    def __init__(self, quiet: bool = False):
        self.quiet = quiet

    @contextmanager
    def stage(self, name: str, detail: str = "") -> Iterator[None]:
        t0 = time.perf_counter()
        if self.quiet:
            yield
            return
        label = f"[bold]{name}[/] [dim]{detail}[/]"
        with err_console.status(label, spinner="dots"):
            try:
                yield
            except BaseException:
                err_console.print(f"[red]✗[/] {name} [dim]({time.perf_counter() - t0:.1f}s)[/]")
                raise
        err_console.print(f"[green]✓[/] {name} [dim]({time.perf_counter() - t0:.1f}s)[/]")

    def info(self, message: str) -> None:
        if not self.quiet:
            err_console.print(f"  [dim]{message}[/]")

    def warn(self, message: str) -> None:
        err_console.print(f"[yellow]warning:[/] {message}")

    def epoch(self, stage: str, epoch: int, total: int, **figures: float) -> None:
        if not self.quiet:
            figs = "  ".join(f"{k} {v:.4g}" for k, v in figures.items())
            err_console.print(f"  [dim]{stage} epoch {epoch}/{total}  {figs}[/]")


def targets_table(manifest: dict[str, Any]) -> Table:
    table = Table(title=f"targets for {manifest.get('profile', {}).get('name', '?')}",
                  box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1, 0, 0))
    for i, h in enumerate(HEADER):
        table.add_column(h, justify="left" if i < 2 else "right", no_wrap=True)
    for row in target_rows(manifest):
        style = "" if row[1].startswith("ok") else "red"
        table.add_row(*row, style=style)
    return table
