"""Publish a build folder atomically and keep concurrent builds from interleaving.

A build writes into a hidden sibling folder and swaps it in only when it is complete, so
a failed or killed build never leaves a half-written manifest or artifact in ``DIR``.
A lock file next to ``DIR`` serialises builds that target the same folder.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from edgesmith.errors import UsageError


def _check_target(out: Path) -> None:
    if out.exists() and not out.is_dir():
        raise UsageError(f"output path {out} exists and is not a directory",
                         fix="choose another --out, or remove the file")
    if out.is_dir() and any(out.iterdir()) and not (out / "manifest.json").exists():
        raise UsageError(
            f"output folder {out} is not empty and holds no edgesmith build",
            fix="choose an empty or new folder: a build replaces the whole folder",
        )


def _recover(out: Path) -> None:
    """Undo a swap that was killed between its two renames; drop stale temp folders."""
    olds = sorted(out.parent.glob(f".{out.name}.old-*"))
    if not out.exists() and olds:
        os.replace(olds[-1], out)
        olds = olds[:-1]
    for stale in (*olds, *out.parent.glob(f".{out.name}.tmp-*")):
        shutil.rmtree(stale, ignore_errors=True)


@contextmanager
def lock(out: Path, on_wait: Callable[[str], None] | None = None) -> Iterator[None]:
    out.parent.mkdir(parents=True, exist_ok=True)
    path = out.parent / f".{out.name}.lock"
    with path.open("a+") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            holder = f.read().strip() or "another process"
            if on_wait:
                on_wait(f"waiting for the build already writing {out} (pid {holder}) to finish")
            fcntl.flock(f, fcntl.LOCK_EX)
        f.seek(0)
        f.truncate()
        f.write(str(os.getpid()))
        f.flush()
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


@contextmanager
def staging(out: Path, on_wait: Callable[[str], None] | None = None) -> Iterator[Path]:
    """Yield a fresh temp folder; the caller calls ``publish(tmp, out)`` when complete.
    Anything not published (an exception, a signal) is removed; ``out`` is untouched."""
    out = Path(out)
    _check_target(out)
    with lock(out, on_wait):
        _recover(out)
        tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        try:
            yield tmp
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


def publish(tmp: Path, out: Path) -> None:
    """Swap ``tmp`` in as ``out``: two renames, recoverable by ``_recover`` if cut between."""
    out = Path(out)
    old = out.parent / f".{out.name}.old-{os.getpid()}"
    if out.exists():
        os.replace(out, old)
    os.replace(tmp, out)
    shutil.rmtree(old, ignore_errors=True)
