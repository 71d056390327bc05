"""The typer app and the one place where errors become exit codes and messages."""

from __future__ import annotations

import logging
import sys

import typer
from rich.console import Console
from rich.markup import escape

from edgesmith.errors import EXIT_INPUT, EdgesmithError

app = typer.Typer(
    no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
    rich_markup_mode="markdown",
    help="Take a trained PyTorch model to edge devices: compress, convert, generate C, "
         "benchmark over SSH. Exit codes: 0 ok, 2 usage/input error, 3 budget miss, "
         "4 conversion failure, 5 device failure.",
)

# progress and messages go to stderr so `--json` output on stdout stays machine-readable
err_console = Console(stderr=True, highlight=False)
out_console = Console(highlight=False)


# third-party converters log advice and version warnings through `logging`; the build's
# logs/ folder keeps converter output, the terminal shows only edgesmith's own lines
QUIET_LOGGERS = ("coremltools", "nncf", "tensorflow", "absl", "onnx2tf", "openvino", "root")


def main() -> None:
    logging.basicConfig(level=logging.ERROR)
    for name in QUIET_LOGGERS:
        logging.getLogger(None if name == "root" else name).setLevel(logging.ERROR)
    try:
        app()
    except EdgesmithError as e:
        # escaped: a message quoting "[batch, 3, h, w]" or "ds.py:get[val]" is not markup
        err_console.print(f"[bold red]error:[/] {escape(e.message())}", markup=True,
                          soft_wrap=True)
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        err_console.print("[yellow]interrupted[/]: a build publishes nothing half-written (the "
                          "previous build folder is untouched); a bench keeps what it measured "
                          "in BUILD_DIR/bench/")
        sys.exit(130)
    except SystemExit:
        raise
    except RecursionError:
        err_console.print("[bold red]error:[/] input nests too deeply to process")
        sys.exit(EXIT_INPUT)
