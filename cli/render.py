"""rich renderings shared by the commands: progress events and result tables."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from rich import box
from rich.console import Console, RenderableType
from rich.table import Table

from edgesmith.pipeline.events import Events, StageOutcome
from edgesmith.pipeline.report import HEADER, target_rows

from .app import err_console

# a table wider than this is surely a bug, not a row to keep whole
_MAX_TABLE_WIDTH = 10_000


def _progress_console() -> Console:
    """A console on its own copy of stderr's file descriptor. The build sends fds 1 and 2
    to a target's log while a converter runs (TensorFlow and OpenVINO print from C++);
    our spinner and stage lines must still reach the terminal, not that log. Where stderr
    is no real descriptor (an in-process test capturing ``sys.stderr``), it is used as is."""
    try:
        fd = sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        return err_console
    stream = os.fdopen(os.dup(fd), "w", buffering=1, encoding="utf-8", errors="replace")
    return Console(file=stream, highlight=False, emoji=False)


class RichEvents(Events):
    """Spinner per stage with elapsed time; a line per finished stage: ✓ when it did its
    job, ✗ when it raised or was marked failed (a target whose conversion failed or
    whose output was rejected)."""

    def __init__(self, quiet: bool = False):
        self.quiet = quiet
        self.console = _progress_console()

    def _line(self, text: str) -> None:
        # soft_wrap: a long message stays one line when piped (no break at column 80)
        self.console.print(text, soft_wrap=True)

    @contextmanager
    def stage(self, name: str, detail: str = "") -> Iterator[StageOutcome]:
        t0 = time.perf_counter()
        outcome = StageOutcome()
        if self.quiet:
            yield outcome
            return
        label = f"[bold]{name}[/] [dim]{detail}[/]"
        with self.console.status(label, spinner="dots"):
            try:
                yield outcome
            except BaseException:
                self._line(f"[red]✗[/] {name} [dim]({time.perf_counter() - t0:.1f}s)[/]")
                raise
        mark = "[red]✗[/]" if outcome.failed else "[green]✓[/]"
        self._line(f"{mark} {name} [dim]({time.perf_counter() - t0:.1f}s)[/]")

    def info(self, message: str) -> None:
        if not self.quiet:
            self._line(f"  [dim]{_escape(message)}[/]")

    def warn(self, message: str) -> None:
        self._line(f"[yellow]warning:[/] {_escape(message)}")

    def epoch(self, stage: str, epoch: int, total: int, **figures: float) -> None:
        if not self.quiet:
            figs = "  ".join(f"{k} {v:.4g}" for k, v in figures.items())
            self._line(f"  [dim]{stage} epoch {epoch}/{total}  {figs}[/]")


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)


def targets_table(manifest: dict[str, Any]) -> Table:
    table = Table(title=f"targets for {manifest.get('profile', {}).get('name', '?')}",
                  box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1, 0, 0))
    for i, h in enumerate(HEADER):
        table.add_column(h, justify="left" if i < 2 else "right", no_wrap=True)
    for row in target_rows(manifest):
        style = "" if row[1].startswith("ok") else "red"
        table.add_row(*row, style=style)
    return table


def print_whole(console: Console, renderable: RenderableType) -> None:
    """Print a table at its natural width, whatever the console's: rich shrinks a table to
    the console (80 columns when piped without ``COLUMNS``) by clipping cells, and a size
    or a latency cut to ``8716…`` is a wrong figure. A terminal narrower than the table
    wraps its rows itself; a pipe or a file keeps every line whole."""
    natural = console.measure(renderable,
                              options=console.options.update_width(_MAX_TABLE_WIDTH)).maximum
    if natural <= console.width:
        console.print(renderable)
        return
    wide = Console(file=console.file, width=natural, highlight=False, emoji=False,
                   color_system=console.color_system, force_terminal=console.is_terminal)
    wide.print(renderable)
