"""Capture what third-party tools print, at the file-descriptor level.

Exporters and converters print from C++ (torch's IR dumps, TensorFlow's logs) straight
to fds 1 and 2, past ``sys.stdout``. A user should see our one-line error, with the full
output kept in the build's log file instead of flooding the terminal.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def capture_output(sink: list[str]) -> Iterator[None]:
    """Redirect fds 1 and 2 to a temp file for the block; append its text to ``sink``."""
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    saved = [os.dup(1), os.dup(2)]
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        os.dup2(tmp.fileno(), 1)
        os.dup2(tmp.fileno(), 2)
        try:
            yield
        finally:
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except ValueError:
                    pass
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)
            tmp.seek(0)
            sink.append(tmp.read().decode("utf-8", errors="replace"))
