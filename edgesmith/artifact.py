"""Artifacts: what crosses room boundaries. A path on disk plus what it is and its hash.

Stages hand each other files, not live objects, which is what makes the stage cache,
the manifest and the SSH upload all the same simple thing.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


def sha256_path(path: Path) -> str:
    """Hash a file, or a directory as the hash of its sorted (relative path, file hash) list."""
    path = Path(path)
    if path.is_file():
        h = hashlib.sha256()
        with path.open("rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        return h.hexdigest()
    h = hashlib.sha256()
    for p in sorted(q for q in path.rglob("*") if q.is_file()):
        h.update(p.relative_to(path).as_posix().encode())
        h.update(b"\0")
        h.update(sha256_path(p).encode())
    return h.hexdigest()


def size_path(path: Path) -> int:
    path = Path(path)
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


@dataclass(frozen=True)
class Artifact:
    """One produced model file (or folder, for Core ML packages and C sources)."""

    path: Path
    format: str
    precision: str
    sha256: str
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.format}-{self.precision}"

    @property
    def size_bytes(self) -> int:
        return int(self.meta.get("size_bytes") or size_path(self.path))

    @classmethod
    def of(cls, path: Path, format: str, precision: str, **meta: Any) -> Artifact:
        path = Path(path)
        meta.setdefault("size_bytes", size_path(path))
        return cls(path=path, format=format, precision=precision, sha256=sha256_path(path),
                   meta=meta)


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Write via a temp file in the same folder, fsync, then rename: readers never see half."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp's 0600 would hide reports from other users
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_text_atomic(path: Path, text: str) -> None:
    write_bytes_atomic(path, text.encode("utf-8"))


def write_json_atomic(path: Path, obj: Any) -> None:
    text = json.dumps(obj, indent=2, sort_keys=False, default=_json_default)
    write_text_atomic(path, text + "\n")


def _json_default(o: Any) -> Any:
    if isinstance(o, Path):
        return o.as_posix()
    if hasattr(o, "item"):  # numpy scalars
        return o.item()
    if hasattr(o, "tolist"):
        return o.tolist()
    if hasattr(o, "value"):  # enums
        return o.value
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")
