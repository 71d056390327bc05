"""The stop signals a shell or a CI runner sends (SIGINT, SIGTERM, SIGHUP), turned into one
exception that unwinds like Ctrl-C, so every ``finally`` on the way cleans up.

One place must not be unwound: an import. The pipeline imports onnx, onnxruntime, torch
and the converters lazily, and their native modules call back into Python while they
initialise; an exception raised there leaves C++ state half-built, and the interpreter
aborts or segfaults instead of cleaning up (one Ctrl-C in about twenty, during the
build's ``import onnx``). So a stop signal that lands inside an import is held and offered
again every ``RETRY_S`` until the import is over; a second signal meanwhile stops at once.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

# how soon a signal held by an import is offered again: imports take milliseconds to a
# few seconds (tensorflow), so the stop comes at most this much after the import ends
RETRY_S = 0.05

# the stop signal an import holds, and the timer that will offer it again
_held: dict[str, object] = {}


class Interrupted(KeyboardInterrupt):
    """Raised by our SIGINT/SIGTERM/SIGHUP handler, so SIGTERM unwinds like Ctrl-C: every
    ``finally`` and ``with`` on the way runs (removing staging and scratch folders), and
    asyncio cancels its tasks as it does for Ctrl-C. Typer turns it into a silent
    ``Exit(130)``; ``main`` finds it behind that and says what happened."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def interrupted_by(e: BaseException) -> int | None:
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


def _importing(frame: FrameType | None) -> bool:
    """Whether ``frame`` runs inside the import machinery (its own frames or a module's
    top level, which the machinery calls)."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib._bootstrap"):
            return True
        frame = frame.f_back
    return False


def _offer_again(signum: int) -> None:
    """Send ``signum`` to the main thread again in ``RETRY_S``. A real signal, not
    ``_thread.interrupt_main``: only a signal wakes a thread blocked in a system call."""
    main = threading.main_thread().ident
    assert main is not None

    def fire() -> None:
        _held["retry"] = True
        signal.pthread_kill(main, signum)

    timer = threading.Timer(RETRY_S, fire)
    timer.daemon = True
    _held["timer"] = timer
    timer.start()


def _release() -> None:
    timer = _held.get("timer")
    if isinstance(timer, threading.Timer):
        timer.cancel()
    _held.clear()


def _raise_interrupted(signum: int, frame: FrameType | None) -> None:
    retry = bool(_held.pop("retry", False))
    # a second signal while the first is held stops at once (one that lands in the
    # microseconds between a retry's flag and its signal is taken for the retry: one more
    # signal then stops)
    if "signum" in _held and not retry:
        _force_stop(signum, frame)
    if _importing(frame):
        _held["signum"] = signum
        _offer_again(signum)
        return
    _release()
    for s in STOP_SIGNALS:  # a second signal during the cleanup stops at once
        if signal.getsignal(s) is _raise_interrupted:
            signal.signal(s, _force_stop)
    raise Interrupted(signum)


def _force_stop(signum: int, _frame: FrameType | None) -> None:
    signal.signal(signum, signal.SIG_DFL)
    signal.raise_signal(signum)  # what is left is swept by the next build


@contextmanager
def stop_signals_raise() -> Iterator[None]:
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
        _release()  # a signal still held when the command ended: it has ended
        for s, handler in previous.items():
            if handler is not None:
                signal.signal(s, handler)
