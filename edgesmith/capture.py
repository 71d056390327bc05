"""Capture what third-party tools print, at the file-descriptor level.

Exporters and converters print from C++ (torch's IR dumps, TensorFlow's absl and oneDNN
lines, the TFLite XNNPACK notice, OpenVINO) straight to fds 1 and 2, past ``sys.stdout``;
Python libraries log through handlers bound to ``sys.stderr`` and draw progress bars
(NNCF) on it. A user should see our own lines, with the full output kept in the build's
log files instead of flooding the terminal.
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def _flush_all() -> None:
    """Python-level buffers go out before the descriptors move, so each line lands on
    the side of the switch it was written on."""
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            if stream is not None:
                stream.flush()
        except (ValueError, OSError):
            pass
    for handler in list(logging.getLogger().handlers):
        try:
            handler.flush()
        except (ValueError, OSError):
            pass


@contextmanager
def _fds_to(fd: int) -> Iterator[None]:
    """Point fds 1 and 2 at ``fd`` for the block; put them back whatever happens."""
    _flush_all()
    saved = [os.dup(1), os.dup(2)]
    try:
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        yield
    finally:
        _flush_all()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for s in saved:
            os.close(s)


@contextmanager
def capture_output(sink: list[str]) -> Iterator[None]:
    """Redirect fds 1 and 2 to a temp file for the block; append its text to ``sink``."""
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        try:
            with _fds_to(tmp.fileno()):
                yield
        finally:
            tmp.seek(0)
            sink.append(tmp.read().decode("utf-8", errors="replace"))


def shown_paths(text: str, staging: Path, out: Path) -> str:
    """``text`` with paths into a build's staging folder moved to the published ``out``:
    a build writes into ``.NAME.tmp-PID`` and renames it at the end, so a message made
    during the build (a fix line naming a log) would point at a folder that is gone."""
    for old, new in ((Path(staging).resolve(), Path(out).resolve()), (staging, out)):
        text = text.replace(str(old), str(new))
    return text


@contextmanager
def to_log(path: Path, *, published: tuple[Path, Path] | None = None) -> Iterator[None]:
    """Append everything printed to fds 1 and 2 during the block to ``path``, as it is
    printed (a killed build keeps what was written). Opened ``O_APPEND``, so lines that
    converters write to the same log through their own handles interleave whole.
    ``published`` = (staging folder, ``--out``): at the end, the log's paths into the
    staging folder are rewritten to where the user will find them (:func:`shown_paths`)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    existed = path.exists()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o666)
    try:
        with _fds_to(fd):
            yield
    finally:
        os.close(fd)
        if not existed and path.exists() and path.stat().st_size == 0:
            path.unlink()  # a quiet step leaves no empty log behind
        elif published is not None and path.exists():
            _rewrite(path, *published)


def _rewrite(path: Path, staging: Path, out: Path) -> None:
    text = path.read_text(encoding="utf-8", errors="replace")
    shown = shown_paths(text, staging, out)
    if shown != text:
        path.write_text(shown, encoding="utf-8")
