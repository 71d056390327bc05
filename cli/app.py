"""The typer app and the one place where errors become exit codes and messages."""

from __future__ import annotations

import logging
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

import typer
from rich.console import Console
from rich.markup import escape

from edgesmith import outdir
from edgesmith.errors import EXIT_INPUT, EdgesmithError, UsageError

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


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(KeyboardInterrupt):
    """Raised by our SIGINT/SIGTERM/SIGHUP handler, so SIGTERM unwinds like Ctrl-C: every
    ``finally`` and ``with`` on the way runs (removing staging and scratch folders), and
    asyncio cancels its tasks as it does for Ctrl-C. Typer turns it into a silent
    ``Exit(130)``; ``main`` finds it behind that and says what happened."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _interrupted_by(e: BaseException) -> int | None:
    """The signal behind an exit, found through typer's ``raise Exit(130) from e``."""
    seen: set[int] = set()
    cur: BaseException | None = e
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, Interrupted):
            return cur.signum
        if isinstance(cur, KeyboardInterrupt):
            return int(signal.SIGINT)
        cur = cur.__cause__ or cur.__context__
    return None


def _raise_interrupted(signum: int, _frame: FrameType | None) -> None:
    for s in STOP_SIGNALS:  # a second signal during the cleanup stops at once
        if signal.getsignal(s) is _raise_interrupted:
            signal.signal(s, _force_stop)
    raise Interrupted(signum)


def _force_stop(signum: int, _frame: FrameType | None) -> None:
    signal.signal(signum, signal.SIG_DFL)
    signal.raise_signal(signum)  # what is left is swept by the next build


@contextmanager
def _stop_signals_raise() -> Iterator[None]:
    """Our handler for the stop signals a shell or a CI runner sends, while ``main`` runs;
    a signal the parent set to ignored (nohup, ``cmd &``) stays ignored."""
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread may set handlers
        return
    previous = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    for s, handler in previous.items():
        if handler is not signal.SIG_IGN:
            signal.signal(s, _raise_interrupted)
    try:
        yield
    finally:
        for s, handler in previous.items():
            if handler is not None:
                signal.signal(s, handler)


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
    with _stop_signals_raise():
        try:
            app()
        except EdgesmithError as e:
            fault = outdir.disk_fault(e) if e.exit_code != EXIT_INPUT else None
            _fail(outdir.disk_error(fault) if fault is not None else e)
        except (KeyboardInterrupt, SystemExit) as e:
            signum = _interrupted_by(e)
            if signum is None:
                raise
            _interrupted(signum)
        except RecursionError:
            err_console.print("[bold red]error:[/] input nests too deeply to process")
            sys.exit(EXIT_INPUT)
        except OSError as e:
            _fail(_as_error(e))
