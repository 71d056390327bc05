"""Stage cache: finished target conversions, keyed by the hash of everything they read.

onnx2tf or NNCF can take a minute per target; re-running a build after editing only the
report or a budget must not pay that again. An entry is reused only when every file still
hashes to what was recorded when it was stored: a truncated or corrupted entry is
discarded and recomputed, never used.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import os
import shutil
from pathlib import Path
from typing import Any

from edgesmith.artifact import sha256_path, write_json_atomic

ENTRY = "entry.json"


def root() -> Path:
    return Path(os.environ.get("EDGESMITH_CACHE") or Path.home() / ".cache" / "edgesmith")


def make_key(parts: dict[str, Any]) -> str:
    blob = json.dumps(parts, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()


def code_hash(obj: Any) -> str:
    """Hash of every source file of the package defining ``obj`` (its room: ``convert/``,
    ``targets/`` with the C runtime's .c/.h files): a change to a converter's helpers, a
    lowering pass or a kernel invalidates its entries, not only a change to the one file
    that defines the target class (which let a cached C target keep stale kernels)."""
    target = obj if inspect.isfunction(obj) or inspect.isclass(obj) else type(obj)
    try:
        return _tree_hash(Path(inspect.getfile(target)).resolve().parent)
    except (TypeError, OSError):
        return "unknown"


SOURCE_SUFFIXES = (".py", ".c", ".h", ".ld")


@functools.lru_cache(maxsize=16)
def _tree_hash(folder: Path) -> str:
    """sha256 over the sorted (relative path, content hash) of the folder's source files;
    computed once per process (a build hashes each room once, not once per target)."""
    h = hashlib.sha256()
    for p in sorted(folder.rglob("*")):
        if p.is_file() and p.suffix in SOURCE_SUFFIXES and "__pycache__" not in p.parts:
            h.update(f"{p.relative_to(folder).as_posix()}\0{sha256_path(p)}\n".encode())
    return h.hexdigest()


def _files(folder: Path) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): sha256_path(p)
            for p in sorted(folder.rglob("*")) if p.is_file()}


def lookup(kind: str, key: str, dest: Path) -> dict[str, Any] | None:
    """Copy a verified entry's files into ``dest`` and return its record, or None."""
    folder = root() / kind / key
    try:
        record = json.loads((folder / ENTRY).read_text())
        files = folder / "files"
        if _files(files) != record["files"]:
            raise ValueError("content does not match the recorded hashes")
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError):
        shutil.rmtree(folder, ignore_errors=True)  # corrupt: drop it, the caller recomputes
        return None
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copytree(files, dest, dirs_exist_ok=True)
    return record


def store(kind: str, key: str, src: Path, record: dict[str, Any]) -> None:
    """Store ``src``'s files; written under a temp name and renamed, so readers never see
    half an entry. A cache that cannot be written is skipped, not an error."""
    final = root() / kind / key
    tmp = final.parent / f".{key}.tmp-{os.getpid()}"
    try:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(src, tmp / "files")
        write_json_atomic(tmp / ENTRY, {**record, "files": _files(tmp / "files")})
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)


def info() -> dict[str, Any]:
    base = root()
    kinds = {}
    for folder in sorted(p for p in base.glob("*") if p.is_dir()):
        entries = [e for e in folder.iterdir() if e.is_dir() and not e.name.startswith(".")]
        size = sum(f.stat().st_size for e in entries for f in e.rglob("*") if f.is_file())
        kinds[folder.name] = {"entries": len(entries), "bytes": size}
    return {"path": str(base), "kinds": kinds,
            "entries": sum(k["entries"] for k in kinds.values()),
            "bytes": sum(k["bytes"] for k in kinds.values())}


def clear() -> int:
    """Remove every entry; return how many were removed."""
    n = info()["entries"]
    shutil.rmtree(root(), ignore_errors=True)
    return n
