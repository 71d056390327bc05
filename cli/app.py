"""The typer app and the one place where errors become exit codes and messages."""

from __future__ import annotations

import logging
import signal
import sys

import typer
from rich.console import Console
from rich.markup import escape

from edgesmith import outdir
from edgesmith.errors import EXIT_INPUT, EdgesmithError, UsageError

from .stop_signals import interrupted_by, stop_signals_raise

app = typer.Typer(
    no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
    rich_markup_mode="markdown",
    help="Take a trained PyTorch model to edge devices: compress, convert, generate C, "
         "benchmark over SSH. Exit codes: 0 ok, 2 usage/input error, 3 budget miss, "
         "4 conversion failure, 5 device failure, 130/143 interrupted (SIGINT/SIGTERM).",
)

# progress and messages go to stderr so `--json` output on stdout stays machine-readable
err_console = Console(stderr=True, highlight=False, emoji=False)
out_console = Console(highlight=False, emoji=False)


# third-party converters log advice and version warnings through `logging`; the build's
# logs/ folder keeps converter output, the terminal shows only edgesmith's own lines
QUIET_LOGGERS = ("coremltools", "nncf", "tensorflow", "absl", "onnx2tf", "openvino", "root")


def _fail(e: EdgesmithError) -> None:
    # escaped: a message quoting "[batch, 3, h, w]" or "ds.py:get[val]" is not markup
    err_console.print(f"[bold red]error:[/] {escape(e.message())}", markup=True, soft_wrap=True)
    sys.exit(e.exit_code)


def _as_error(e: OSError) -> EdgesmithError:
    """An OSError that reached the top is the environment's (a full or read-only disk, a
    path we may not use): one message naming the path, exit 2, no traceback."""
    fault = outdir.disk_fault(e)
    if fault is not None:
        return outdir.disk_error(fault)
    return UsageError(f"{e.strerror or e}", where=str(e.filename) if e.filename else None,
                      fix="check that path and its permissions, then run again")


def _interrupted(signum: int) -> None:
    name = signal.Signals(signum).name
    err_console.print(f"[yellow]interrupted[/] ({name}): nothing half-written was published "
                      "(the build folder holds the previous build, or this one if it was "
                      "already complete) and scratch folders are removed; a bench keeps what "
                      "it measured in BUILD_DIR/bench/")
    sys.exit(128 + signum)


def main() -> None:
    logging.basicConfig(level=logging.ERROR)
    for name in QUIET_LOGGERS:
        logging.getLogger(None if name == "root" else name).setLevel(logging.ERROR)
    with stop_signals_raise():
        try:
            app()
        except EdgesmithError as e:
            fault = outdir.disk_fault(e) if e.exit_code != EXIT_INPUT else None
            _fail(outdir.disk_error(fault) if fault is not None else e)
        except (KeyboardInterrupt, SystemExit) as e:
            signum = interrupted_by(e)
            if signum is None:
                raise
            _interrupted(signum)
        except RecursionError:
            err_console.print("[bold red]error:[/] input nests too deeply to process")
            sys.exit(EXIT_INPUT)
        except OSError as e:
            _fail(_as_error(e))
