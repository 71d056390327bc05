"""Publish a build folder in one step and keep builds into one folder from interleaving.

A build is staged out of sight and published only when complete, so a failed or killed
build never leaves a half-written manifest or artifact in ``DIR``:

- an ordinary ``DIR`` is staged in the hidden sibling ``.DIR.tmp-PID`` and exchanged with it
  by one ``renameat2(RENAME_EXCHANGE)`` (Linux): no reader ever finds ``DIR`` missing or
  half-written. Where the kernel or filesystem lacks that call (not Linux, NFS), two
  renames, and a cut between them is undone by ``recover``.
- a ``DIR`` that cannot be renamed (a mount point: a CI volume, a bind mount; or a parent we
  may not write) is staged inside itself, in ``DIR/.edgesmith-tmp-PID``, and its contents
  are swapped: old entries leave with manifest.json first, new ones arrive with
  manifest.json last, so ``DIR`` is a build folder only while whole; ``recover`` rolls a
  cut swap back.

A lock file serialises builds (and benches) into one folder; whoever takes it first
repairs a publish that a kill cut short and clears stale staging folders. Scratch folders
(``work_dir``) hold a lock while in use, so the next build sweeps those of killed ones.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import functools
import os
import re
import shutil
import signal
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO

from edgesmith.errors import UsageError

MANIFEST = "manifest.json"
HIDDEN = ".edgesmith"  # DIR/.edgesmith.lock, DIR/.edgesmith-{tmp,old,trash}-PID in place
COMPLETE = f"{HIDDEN}-complete"  # in DIR/.edgesmith-old-PID: every old entry has left DIR
RESERVED = frozenset({"lost+found"})  # a fresh ext4 volume's, not part of any build
WORK_PREFIX = "edgesmith-work-"
OWNER = ".owner"  # in a work dir: flock-held by the build using it
MIB = 1 << 20
FLOOR_BYTES = 16 * MIB
PER_TARGET_FACTOR = 4
LOW_SPACE_BYTES = 4 * MIB  # less than this left when a step fails: the disk is why
DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS})
KEPT = "nothing was published, the previous build is untouched"
_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


# --- what DIR is ---------------------------------------------------------------------------

def _resolve(out: Path) -> Path:
    """The real folder: a symlinked --out is published into its target, the link kept."""
    return Path(os.path.realpath(out))


def _mount_points() -> set[str]:
    """Every mount point of this process; ``os.path.ismount`` misses a bind mount of a
    folder from the same filesystem, which is what ``docker -v`` often is."""
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return set()
    unescape = functools.partial(re.sub, r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)))
    return {unescape(fields[4]) for fields in map(str.split, lines) if len(fields) > 4}


def _fixed(out: Path) -> bool:
    """True when DIR itself cannot be renamed: a mount point, or a parent we may not write."""
    if not out.is_dir():
        return False
    return (os.path.ismount(out) or str(out) in _mount_points()
            or not os.access(out.parent, os.W_OK | os.X_OK))


def _entries(folder: Path) -> list[Path]:
    """A build's own entries: ours and the filesystem's bookkeeping left out."""
    return [e for e in folder.iterdir() if not e.name.startswith(HIDDEN) and e.name not in RESERVED]


def _check_target(out: Path) -> None:
    if out.exists() and not out.is_dir():
        raise UsageError(f"output path {out} exists and is not a directory",
                         fix="choose another --out, or remove the file")
    if out.is_dir() and not (out / MANIFEST).exists() and _entries(out):
        raise UsageError(
            f"output folder {out} is not empty and holds no edgesmith build",
            fix="choose an empty or new folder: a build replaces the whole folder",
        )


def _cannot_write(out: Path, e: OSError) -> UsageError:
    """One message for an output path we cannot use: the user's path, the file, why."""
    name = f" {e.filename}" if e.filename else ""
    fault = disk_fault(e)
    if fault is not None:
        fix = disk_fix(fault)
    elif e.errno in (errno.EEXIST, errno.ENOTDIR):
        fix = "a part of that path is a file, not a folder: choose another --out"
    else:
        fix = ("choose an --out on a writable filesystem (not /proc or /sys), in a folder "
               "you may write")
    return UsageError(f"cannot write{name}: {e.strerror or e}", where=str(out), fix=fix)


def disk_fix(fault: OSError) -> str:
    if fault.errno == errno.EROFS:
        return f"that filesystem is mounted read-only: write elsewhere (--out, TMPDIR); {KEPT}"
    return (f"free space there (`df -h`) or write elsewhere (--out, TMPDIR, EDGESMITH_CACHE), "
            f"then build again; {KEPT}")


# --- locking and recovery ------------------------------------------------------------------

def _lock_path(out: Path) -> Path:
    return out / f"{HIDDEN}.lock" if _fixed(out) else out.parent / f".{out.name}.lock"


def _open_lock(out: Path) -> IO[str]:
    path = _lock_path(out)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return path.open("a+")
    except OSError as e:
        raise _cannot_write(out, e) from None


@contextmanager
def lock(out: Path, on_wait: Callable[[str], None] | None = None,
         job: str = "build") -> Iterator[None]:
    """Hold DIR's lock, waiting (and saying so, naming the holder's ``job``: build or
    bench) for the holder; then put right a publish that a kill cut short, so every lock
    holder finds DIR whole. The lock file holds "JOB PID" while held."""
    out = _resolve(Path(out))
    with _open_lock(out) as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            if on_wait:
                on_wait(_waiting(out, f.read()))
            fcntl.flock(f, fcntl.LOCK_EX)
        try:
            f.seek(0)
            f.truncate()
            f.write(f"{job} {os.getpid()}")
            f.flush()
            _recover(out)
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _waiting(out: Path, holder: str) -> str:
    """"waiting for the bench already running on DIR (pid N)": the holder's job and pid as
    its lock file says (a bare pid: a build of an older edgesmith)."""
    words = holder.split()
    job, pid = (words[0], words[1]) if len(words) == 2 else ("build", words[0] if words
                                                              else "another process")
    doing = "writing" if job == "build" else "running on"
    return f"waiting for the {job} already {doing} {out} (pid {pid}) to finish"


def recover(out: Path) -> None:
    """For readers (``bench``) that may reach DIR before the next build does: put right a
    publish that a kill cut short. A no-op while someone holds the lock (they will)."""
    out = _resolve(Path(out))
    try:  # no O_CREAT: a folder no build ever locked has nothing to recover, and a typo'd
        f = os.fdopen(os.open(_lock_path(out), os.O_RDWR), "r+")  # path gets no lock file
    except OSError:
        return
    with f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return
        try:
            _recover(out)
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _recover(out: Path) -> None:
    try:
        if _fixed(out):
            _recover_in_place(out)
        else:
            _recover_sibling(out)
    except OSError as e:
        raise _cannot_write(out, e) from None


def _recover_sibling(out: Path) -> None:
    """Undo a two-rename swap killed between its renames; drop stale temp folders (after an
    exchange, ``.DIR.tmp-PID`` holds the build it replaced)."""
    olds = sorted(out.parent.glob(f".{out.name}.old-*"))
    if not out.exists() and olds:
        os.replace(olds[-1], out)
        olds = olds[:-1]
    for stale in (*olds, *out.parent.glob(f".{out.name}.tmp-*")):
        shutil.rmtree(stale, ignore_errors=True)


def _recover_in_place(out: Path) -> None:
    """Roll back a contents swap that a kill cut short: without manifest.json DIR is not a
    build, so what ``.edgesmith-old-PID`` holds goes back. Each step can be cut and redone."""
    if not (out / MANIFEST).exists():
        for old in sorted(out.glob(f"{HIDDEN}-old-*")):
            if (old / COMPLETE).exists():  # the new build had begun to arrive: remove it
                for e in _entries(out):
                    _remove(e)
                (old / COMPLETE).unlink()
            for e in _entries(old):
                os.replace(e, out / e.name)
    for stale in out.glob(f"{HIDDEN}-*-*"):
        shutil.rmtree(stale, ignore_errors=True)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()


# --- staging and publishing ----------------------------------------------------------------

def estimate_bytes(model_bytes: int, n_targets: int) -> int:
    """Room a build needs, generously: a multiple of the weights per target (artifact, logs,
    rejected copy, C sources) plus a floor for reports, plots and data. The digits demo
    writes 1.8 MB for 9 targets of a 0.27 MB model; this asks 26 MB."""
    return FLOOR_BYTES + PER_TARGET_FACTOR * max(model_bytes, 0) * max(n_targets, 1)


def _check_space(path: Path, need: int, shown: Path) -> None:
    free = shutil.disk_usage(path).free
    if free < need:
        raise UsageError(
            f"only {free / MIB:.1f} MiB free on the filesystem of {shown}; this build needs "
            f"about {need / MIB:.0f} MiB", where=str(shown),
            fix="free space there, or write elsewhere (--out, TMPDIR)")


@contextmanager
def staging(out: Path, on_wait: Callable[[str], None] | None = None,
            need_bytes: int = 0) -> Iterator[Path]:
    """Yield a fresh temp folder, checked writable with ``need_bytes`` free; the caller
    calls ``publish(tmp, out)`` when complete. Anything not published (an exception, a
    signal) is removed; ``out`` is untouched."""
    out = _resolve(Path(out))
    with lock(out, on_wait):
        _check_target(out)
        pid = os.getpid()
        tmp = out / f"{HIDDEN}-tmp-{pid}" if _fixed(out) else out.parent / f".{out.name}.tmp-{pid}"
        try:
            tmp.mkdir(parents=True)
        except OSError as e:
            raise _cannot_write(out, e) from None
        try:
            _check_space(tmp, need_bytes, out)
            yield tmp
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


def publish(tmp: Path, out: Path) -> None:
    """Make the staged build ``tmp`` the contents of ``out``, in a step no reader can split
    and no signal can interrupt. An OSError becomes one UsageError naming the path."""
    out = _resolve(Path(out))
    tmp = _resolve(Path(tmp))
    try:
        with _signals_deferred():
            if tmp.parent == out:
                _swap_contents(tmp, out)
            elif not out.exists():
                os.rename(tmp, out)
            elif not _exchange(tmp, out):
                _two_renames(tmp, out)
    except OSError as e:
        with suppress(OSError, UsageError):
            _recover(out)
        raise _publish_error(out, e) from None
    shutil.rmtree(tmp, ignore_errors=True)  # after an exchange: the build it replaced


def _swap_contents(tmp: Path, out: Path) -> None:
    """Publish into a folder that must stay where it is (see the module docstring)."""
    pid = os.getpid()
    old = out / f"{HIDDEN}-old-{pid}"
    old.mkdir()
    for e in sorted(_entries(out), key=lambda e: e.name != MANIFEST):  # manifest first out
        os.replace(e, old / e.name)
    (old / COMPLETE).touch()
    for e in sorted(_entries(tmp), key=lambda e: e.name == MANIFEST):  # manifest last in
        os.replace(e, out / e.name)
    trash = out / f"{HIDDEN}-trash-{pid}"
    os.replace(old, trash)
    shutil.rmtree(trash, ignore_errors=True)


def _two_renames(tmp: Path, out: Path) -> None:
    """The portable swap: a kill between the renames is undone by ``_recover_sibling``."""
    old = out.parent / f".{out.name}.old-{os.getpid()}"
    os.replace(out, old)
    os.replace(tmp, out)
    shutil.rmtree(old, ignore_errors=True)


@functools.cache
def _renameat2() -> Callable[..., int] | None:
    fn = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
    if fn is not None:
        fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                       ctypes.c_uint]
        fn.restype = ctypes.c_int
    return fn


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths in one system call; False where this kernel or filesystem cannot."""
    fn = _renameat2()
    if fn is None:
        return False
    if fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def _publish_error(out: Path, e: OSError) -> UsageError:
    if e.errno in (errno.EBUSY, errno.EXDEV):
        return UsageError(f"cannot replace {out}: {e.strerror} (a mount point not listed in "
                          "/proc/self/mountinfo?)", where=str(out),
                          fix=f"pass a folder inside the mount as --out; {KEPT}")
    name = f" {e.filename}" if e.filename else ""
    fault = disk_fault(e)
    fix = disk_fix(fault) if fault is not None else f"make it writable and build again; {KEPT}"
    return UsageError(f"publishing failed: cannot write{name}: {e.strerror or e}",
                      where=str(out), fix=fix)


@contextmanager
def _signals_deferred() -> Iterator[None]:
    """Hold SIGINT/SIGTERM/SIGHUP for the few renames of a publish and deliver them after:
    a handler that raised between two renames would leave the publish half-made."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    sigs = [s for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
            if signal.getsignal(s) not in (signal.SIG_IGN, None)]
    previous = {s: signal.signal(s, lambda n, _frame: caught.append(n)) for s in sigs}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        if caught:
            signal.raise_signal(caught[0])


# --- scratch folders -----------------------------------------------------------------------

@contextmanager
def work_dir(need_bytes: int = 0) -> Iterator[Path]:
    """A scratch folder in the system temp dir, removed on exit. It holds a lock while in
    use, so folders of builds that were killed (SIGKILL, power loss) are swept first."""
    base = Path(tempfile.gettempdir())
    sweep_work_dirs(base)
    try:
        path = Path(tempfile.mkdtemp(prefix=WORK_PREFIX, dir=base))
        owner = _hold_owner(path)
    except OSError as e:
        raise _cannot_write(base, e) from None
    with owner:
        try:
            _check_space(path, need_bytes, base)
            yield path
        finally:
            shutil.rmtree(path, ignore_errors=True)


def _hold_owner(path: Path) -> IO[str]:
    """Lock the owner file before it gets its name, so no sweeper sees it unlocked."""
    staged = path / f"{OWNER}.new"
    f = staged.open("w")
    fcntl.flock(f, fcntl.LOCK_EX)
    os.replace(staged, path / OWNER)
    return f


def sweep_work_dirs(base: Path) -> list[Path]:
    """Remove scratch folders whose owner lock nobody holds; return them."""
    swept = []
    for d in Path(base).glob(f"{WORK_PREFIX}*"):
        try:
            with (d / OWNER).open() as f:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                shutil.rmtree(d, ignore_errors=True)
                swept.append(d)
        except OSError:
            continue  # in use, not ours, or still being set up
    return swept


# --- full or read-only disks ---------------------------------------------------------------

def disk_fault(exc: BaseException) -> OSError | None:
    """The full-disk, quota or read-only-filesystem error behind ``exc``, however a
    converter wrapped it (``raise ... from None`` still keeps ``__context__``)."""
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno in DISK_ERRNOS:
            return e
        text = str(e)
        for n in DISK_ERRNOS:
            if os.strerror(n) in text:  # a C++ library's message, no errno attached
                return OSError(n, os.strerror(n), getattr(e, "filename", None))
        e = e.__cause__ or e.__context__
    return None


def disk_error(fault: OSError) -> UsageError:
    what = fault.strerror or os.strerror(fault.errno or errno.ENOSPC)
    return UsageError(f"{what} (the build stopped: every later step would fail the same way)",
                      where=str(fault.filename) if fault.filename else None,
                      fix=disk_fix(fault))


def raise_if_disk_fault(exc: BaseException, near: Path | None = None) -> None:
    """For stages that record a failure and go on: a full or read-only disk is no target's
    failure, so it stops the build with one message instead of one bogus one per target.
    With ``near`` (the build folder), a failure while that disk is all but full counts too."""
    fault = disk_fault(exc)
    if fault is None and near is not None:
        fault = _full_disk_near(Path(near), exc)
    if fault is not None:
        raise disk_error(fault) from None


def _full_disk_near(path: Path, exc: BaseException) -> OSError | None:
    """Some writers (C++ ones: onnx shape inference inside onnxruntime's quantizer) cut a
    file short without an error when the disk fills; it surfaces later as a "corrupt"
    model. A step failing while the disk has almost nothing left is put down to the disk."""
    try:
        free = shutil.disk_usage(path).free
    except OSError:
        return None
    if free >= LOW_SPACE_BYTES:
        return None
    cause = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}" if str(exc) else \
        type(exc).__name__
    return OSError(errno.ENOSPC, f"{os.strerror(errno.ENOSPC)}: {free / MIB:.1f} MiB left "
                   f"when a step failed ({cause})", str(path))
