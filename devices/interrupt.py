"""Run the bench's event loop so that Ctrl-C (or SIGTERM/SIGHUP) cancels it cleanly.

A Python-level signal handler that raises (the CLI's does, so SIGTERM unwinds like
Ctrl-C) fires wherever the loop happens to be, possibly inside asyncssh's packet handling;
``asyncio.run`` then cancels *every* task, asyncssh's SFTP receiver included, and the
clean-up that should stop the remote command and remove the work dir hangs on a dead
channel. Here the loop itself takes the stop signals while it runs: the first one cancels
only the bench's task, whose clean-up then runs with the connection intact; afterwards the
signal is handed to whatever handler was there before (the CLI's exits 130 and says so). A
second signal during the clean-up stops the process at once.
"""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def run(coro: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(coro)``, with the stop signals cancelling ``coro`` (see the module doc)."""
    if threading.current_thread() is not threading.main_thread():
        return asyncio.run(coro)  # only the main thread receives signals
    with asyncio.Runner() as runner:
        loop = runner.get_loop()
        task = loop.create_task(coro)
        previous = {s: signal.getsignal(s) for s in STOP_SIGNALS}
        watched = [s for s, h in previous.items() if h is not signal.SIG_IGN and h is not None]
        received: list[int] = []

        def on_signal(signum: int) -> None:
            if received:  # the second one: no more waiting on clean-up
                _restore(previous)
                signal.signal(signum, signal.SIG_DFL)
                signal.raise_signal(signum)
            received.append(signum)
            task.cancel()

        for s in watched:
            loop.add_signal_handler(s, on_signal, s)
        result = None
        try:
            result = loop.run_until_complete(task)
        except asyncio.CancelledError:
            if not received:
                raise
        finally:
            for s in watched:
                loop.remove_signal_handler(s)
            _restore(previous)
        if received:
            signal.raise_signal(received[0])  # the previous handler says what a stop means
            raise KeyboardInterrupt  # it returned: stop all the same
        return result


def _restore(previous: dict[signal.Signals, Any]) -> None:
    for s, handler in previous.items():
        if handler is not None:
            signal.signal(s, handler)
