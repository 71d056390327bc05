"""The stop signals a shell or a CI runner sends (SIGINT, SIGTERM, SIGHUP), turned into one
exception that unwinds like Ctrl-C, so every ``finally`` on the way cleans up."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


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


def _raise_interrupted(signum: int, _frame: FrameType | None) -> None:
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
        for s, handler in previous.items():
            if handler is not None:
                signal.signal(s, handler)
