"""The rooms import in one direction only, as docs/ARCHITECTURE.md draws them:

    cli -> pipeline -> {compress, convert, targets, devices} -> profiles -> core (edgesmith/)

A room may import any room below it, never one above it, and the middle rooms never
form a cycle among themselves. Imports inside functions count too: hiding an upward
import in a function is exactly the cycle this test exists to stop. Imports under
``if TYPE_CHECKING:`` are annotations only and are not followed.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

# folder -> (room, layer); a room may import rooms of a lower layer, and its own
ROOMS = {"edgesmith": ("core", 0), "profiles": ("profiles", 1), "compress": ("compress", 2),
         "convert": ("convert", 2), "targets": ("targets", 2), "devices": ("devices", 2),
         "pipeline": ("pipeline", 3), "cli": ("cli", 4)}
BY_PACKAGE = {"edgesmith": "core", "edgesmith.profiles": "profiles",
              **{f"edgesmith.{f}": room for f, (room, _) in ROOMS.items() if f != "edgesmith"}}
LAYER = {room: layer for room, layer in ROOMS.values()}


def _room_of(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "edgesmith":
        return None
    if len(parts) > 1 and f"edgesmith.{parts[1]}" in BY_PACKAGE:
        return BY_PACKAGE[f"edgesmith.{parts[1]}"]
    return "core"


def _type_checking_lines(tree: ast.AST) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


def _imports(path: Path, package: str) -> list[tuple[int, str]]:
    """(line, absolute module) of every import of an edgesmith module in the file."""
    tree = ast.parse(path.read_text(), str(path))
    skip = _type_checking_lines(tree)
    found = []
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) in skip:
            continue
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against the file's package
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            if module == "edgesmith":  # `from edgesmith import profiles` names a room
                found += [(node.lineno, f"edgesmith.{a.name}") for a in node.names]
            else:
                found.append((node.lineno, module))
    return [(line, m) for line, m in found if m.split(".")[0] == "edgesmith"]


def _edges() -> list[tuple[str, str, str]]:
    """(from room, to room, 'file:line imports module') for every cross-room import."""
    edges = []
    for folder, (room, _) in ROOMS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT / folder).with_suffix("")
            pkg_parts = ["edgesmith"] + ([] if folder == "edgesmith" else [folder])
            package = ".".join(pkg_parts + list(rel.parts[:-1]))
            for line, module in _imports(path, package):
                other = _room_of(module)
                if other is not None and other != room:
                    edges.append((room, other,
                                  f"{path.relative_to(ROOT)}:{line} imports {module}"))
    return edges


def test_no_room_imports_a_room_above_it():
    upward = [where for src, dst, where in _edges() if LAYER[dst] > LAYER[src]]
    assert not upward, "imports against the layering:\n  " + "\n  ".join(upward)


def test_rooms_of_one_layer_form_no_cycle():
    graph: dict[str, set[str]] = {}
    for src, dst, _ in _edges():
        if LAYER[src] == LAYER[dst]:
            graph.setdefault(src, set()).add(dst)

    def reaches(a: str, b: str, seen: set[str]) -> bool:
        return any(n == b or (n not in seen and reaches(n, b, seen | {n}))
                   for n in graph.get(a, ()))

    cycles = sorted(f"{a} <-> {b}" for a in graph for b in graph[a] if reaches(b, a, {b}))
    assert not cycles, f"rooms importing each other: {cycles}"


def test_the_layering_test_sees_an_upward_import(tmp_path, monkeypatch):
    """The test above must be able to fail: a core module importing the pipeline is found,
    also from inside a function, and a TYPE_CHECKING import is not."""
    fake = tmp_path / "edgesmith"
    fake.mkdir()
    (fake / "leaf.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from edgesmith.pipeline import build\n"
        "def f():\n    from edgesmith.pipeline import stages\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    monkeypatch.setattr(sys.modules[__name__], "ROOMS", {"edgesmith": ("core", 0)})
    assert [(s, d) for s, d, _ in _edges()] == [("core", "pipeline")]


@pytest.mark.parametrize("module", ["edgesmith.target", "edgesmith.artifact", "edgesmith.outdir",
                                    "edgesmith.versions", "edgesmith.capture"])
def test_importing_the_core_loads_no_room(module):
    code = (f"import sys, {module}\n"
            "rooms = sorted({m.split('.')[1] for m in sys.modules if m.startswith('edgesmith.')"
            " and m.split('.')[1] in ('cli', 'pipeline', 'compress', 'convert', 'targets',"
            " 'devices', 'profiles')})\n"
            "print(','.join(rooms))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, check=True).stdout.strip()
    assert out == "", f"importing {module} loaded rooms: {out}"
