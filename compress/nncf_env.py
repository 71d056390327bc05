"""Make NNCF's torch C++ extension load reliably.

NNCF compiles ``quantized_functions_cpu`` with gcc + ninja on first use (about a minute
on 2 cores) and gives up after ``NNCF_EXTENSION_LOAD_TIMEOUT`` seconds, 60 by default:
a cold build on a small machine times out. A build that was killed leaves torch's
``FileBaton`` ``lock`` file in the build folder, and every later load then waits on it
forever. :func:`prepare` raises the timeout (unless the user set it) and removes a lock
that nobody holds any more.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

TIMEOUT_ENV = "NNCF_EXTENSION_LOAD_TIMEOUT"
DEFAULT_TIMEOUT_S = 600
# Between taking the lock and starting ninja, torch writes build.ninja (well under a
# second); a lock this old with no process building in its folder is left over.
STALE_GRACE_S = 60.0


def extensions_root() -> Path:
    """Where NNCF builds its extensions: ``<torch extensions dir>/<pyXY_cpu>/nncf``.

    torch's dir is ``TORCH_EXTENSIONS_DIR`` or ``~/.cache/torch_extensions``; NNCF asks
    for the build folder of ``nncf/<name>`` (then adds the torch version below it).
    """
    from torch.utils.cpp_extension import _get_build_directory

    return Path(_get_build_directory("nncf", verbose=False))


def _building_in(folder: Path) -> bool:
    """Is any live process working in ``folder`` (ninja and the compilers run there)?"""
    proc = Path("/proc")
    if not proc.is_dir():
        return True  # cannot tell: assume busy, never remove a lock we cannot judge
    target = str(folder.resolve())
    for pid in proc.iterdir():
        if not pid.name.isdigit():
            continue
        try:
            cwd = os.readlink(pid / "cwd")
        except OSError:
            continue
        if cwd == target or cwd.startswith(target + os.sep):
            return True
    return False


def stale_locks(root: Path | None = None, *, grace_s: float = STALE_GRACE_S,
                now: float | None = None) -> list[Path]:
    """``lock`` files under ``root`` older than ``grace_s`` with no build running beside them."""
    root = extensions_root() if root is None else Path(root)
    now = time.time() if now is None else now
    found = []
    for lock in root.rglob("lock"):
        try:
            age = now - lock.stat().st_mtime
        except OSError:
            continue
        if age >= grace_s and not _building_in(lock.parent):
            found.append(lock)
    return found


def prepare(timeout_s: int = DEFAULT_TIMEOUT_S, root: Path | None = None) -> dict[str, object]:
    """Set the load timeout (a user's own setting wins) and clear stale build locks."""
    os.environ.setdefault(TIMEOUT_ENV, str(timeout_s))
    cleared = []
    for lock in stale_locks(root):
        try:
            lock.unlink()
            cleared.append(str(lock))
        except OSError:
            pass
    return {"timeout_s": os.environ[TIMEOUT_ENV], "cleared_locks": cleared}
