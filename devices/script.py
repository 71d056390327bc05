"""The uploaded bench script: ``remote.py`` with its parts (the power sweep) and every
format's device loader embedded.

``remote.py`` names no format. Each ``Target`` points ``device_loader`` at a stdlib-only
file beside its module; this assembles one file from ``remote.py`` and those sources
(format -> source, in ``LOADER_SOURCES``), which the script compiles into a namespace of
its own per format when asked to bench it. One file, standard library only (plus the
format's runtime on the device), Python 3.8 compatible: checked here before any upload.
"""

from __future__ import annotations

import ast
from pathlib import Path

from edgesmith.errors import DeviceError
from edgesmith.target import Target

REMOTE_SCRIPT = Path(__file__).with_name("remote.py")
# parts of the script kept in files of their own (name -> file), embedded like the loaders
PARTS = {"power": Path(__file__).with_name("remote_power.py"),
         "preprocess": Path(__file__).with_name("remote_preprocess.py"),
         "detect": Path(__file__).with_name("remote_detect.py")}
REMOTE_NAME = "edgesmith_remote.py"
MARK = "# @@LOADERS@@\n"
DEVICE_PYTHON = (3, 8)  # the oldest python a device image may have


def _python38(source: str, origin: str) -> None:
    """Refuse a source the oldest device python cannot compile (an edgesmith bug)."""
    try:
        ast.parse(source, origin, feature_version=DEVICE_PYTHON)
    except SyntaxError as e:
        raise DeviceError(f"the bench script cannot be assembled: {origin}:{e.lineno}: {e.msg}",
                          where=origin,
                          fix="report this: device loaders must stay Python 3.8 compatible "
                              "(it is an edgesmith bug)") from None


def loader_sources(formats: dict[str, type[Target]]) -> dict[str, tuple[Path, str]]:
    """{format: (file, source)} of every format that has a device loader."""
    out = {}
    for fmt, cls in sorted(formats.items()):
        if cls.device_loader is not None:
            path = Path(cls.device_loader)
            source = path.read_text(encoding="utf-8")
            _python38(source, str(path))
            out[fmt] = (path, source)
    return out


def _literal(fmt: str, path: Path, source: str, table: str = "LOADER_SOURCES") -> str:
    """``LOADER_SOURCES[fmt] = (...)``: one string literal per source line, so the uploaded
    file still reads line by line."""
    lines = [f"{table}[{fmt!r}] = (  # {path.parent.name}/{path.name}"]
    lines += [f"    {line!r}" for line in source.splitlines(keepends=True)] or ["    ''"]
    return "\n".join(lines) + "\n)\n"


def assemble(formats: dict[str, type[Target]]) -> str:
    """The text of the one-file bench script, with its parts and the loaders of
    ``formats``."""
    text = REMOTE_SCRIPT.read_text(encoding="utf-8")
    if text.count(MARK) != 1:
        raise DeviceError(f"{REMOTE_SCRIPT} has no single {MARK.strip()!r} line",
                          where=str(REMOTE_SCRIPT), fix="report this: it is an edgesmith bug")
    loaders = "".join(_literal(fmt, path, source)
                      for fmt, (path, source) in loader_sources(formats).items())
    for name, path in PARTS.items():
        source = path.read_text(encoding="utf-8")
        _python38(source, str(path))
        loaders += _literal(name, path, source, "PART_SOURCES")
    script = text.replace(MARK, loaders)
    _python38(script, REMOTE_NAME)
    return script


def write(formats: dict[str, type[Target]], folder: Path) -> Path:
    """Write the assembled script as ``folder/edgesmith_remote.py``; returns its path."""
    path = Path(folder) / REMOTE_NAME
    path.write_text(assemble(formats), encoding="utf-8")
    return path
