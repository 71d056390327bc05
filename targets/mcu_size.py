"""Flash and RAM of a generated C folder on a microcontroller, measured on the
cross-compiled objects: what ``budgets.model_kb`` and ``budgets.arena_kb`` are about on an
MCU, where the generated source text (a weights array written out in decimal) says nothing.

    flash = .text + .rodata (the weights are const arrays there) + .data's init image
    RAM   = arena + .bss + .data + stack

Sections come from ``<prefix>size -A`` of the model library's objects, compiled with the
profile's cross compiler and flags; the stack is the deepest call chain below the API
(es_init, es_run, ...) in gcc's ``-fcallgraph-info=su`` graph, each frame as gcc sized it.
Not counted: the application's own code and frames, newlib/libm functions the library
calls (memcpy, expf) and hook callbacks; the README says so where it shows the figures.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgesmith.errors import ConversionError, UsageError

from .isa import is_mcu, macros

WEIGHTS_SOURCE = "weights_data.c"
# the API an application calls; the stack is the deepest chain below one of them
API_ROOTS = ("es_init", "es_input", "es_run", "es_run_slice", "es_output", "es_deinit")


@dataclass(frozen=True)
class McuSize:
    text: int  # code, plus the unwind tables that live beside it in flash
    rodata: int  # constants: the weights, the plan tables, the parameter blocks
    data: int  # initialised variables: in RAM, their initial image in flash
    bss: int
    stack: int
    arena: int

    @property
    def flash(self) -> int:
        return self.text + self.rodata + self.data

    @property
    def ram(self) -> int:
        return self.arena + self.bss + self.data + self.stack

    def figures(self) -> dict[str, Any]:
        """What the C target records in its artifact's meta (bytes)."""
        return {"flash_bytes": self.flash, "ram_bytes": self.ram,
                "mcu_sections": {"text": self.text, "rodata": self.rodata, "data": self.data,
                                 "bss": self.bss, "stack": self.stack, "arena": self.arena}}


def targets_mcu(cc: str | None, cflags: str = "") -> bool:
    """Whether ``cc cflags`` builds for a Cortex-M (so flash and RAM are what count)."""
    return bool(cc) and is_mcu(macros(cc, cflags))


def measure(folder: Path, cc: str, cflags: str) -> McuSize:
    """Flash and RAM of the model library in ``folder`` (a generated C folder) built with
    ``cc cflags``. The weights' bytes are ``weights_data.o``'s when a cross build left it
    in ``folder`` (one for the same machine as ``cc``'s objects, not a host build's), else
    ES_WEIGHTS_BYTES of model.h (the payload the array holds: what
    ``inspect`` estimates with before any build)."""
    folder = Path(folder)
    header = (folder / "model.h").read_text()
    sources = library_sources(folder)
    with tempfile.TemporaryDirectory(prefix="es_mcu_size_") as tmp:
        objs = [_compile(folder, src, Path(tmp), cc, cflags) for src in sources
                if src != WEIGHTS_SOURCE]
        weights_o = folder / "weights_data.o"
        # a host build of the folder leaves an x86 weights_data.o that size cannot read
        cross_weights = (WEIGHTS_SOURCE in sources and weights_o.is_file() and bool(objs)
                         and _elf_machine(weights_o) == _elf_machine(objs[0]))
        if cross_weights:
            objs.append(weights_o)
        sec = sections(size_tool(cc), objs)
        stack = deepest_stack(Path(tmp).glob("*.ci"))
    rodata = sec["rodata"]
    if not cross_weights:
        rodata += _define(header, "ES_WEIGHTS_BYTES")
    return McuSize(text=sec["text"], rodata=rodata, data=sec["data"], bss=sec["bss"],
                   stack=stack, arena=_define(header, "ES_ARENA_BYTES"))


def size_tool(cc: str) -> str:
    """``size`` of the cross toolchain: arm-none-eabi-gcc -> arm-none-eabi-size."""
    word = shlex.split(cc)[0]
    tool = re.sub(r"(gcc|cc|clang)(-[\d.]+)?$", "size", Path(word).name)
    found = shutil.which(str(Path(word).with_name(tool))) or shutil.which(tool)
    if not found:
        raise UsageError(f"{tool} (binutils of {word}) is not on this machine's PATH",
                         where="c target options: cross_cc",
                         fix="install it (apt-get install binutils-arm-none-eabi)")
    return found


def sections(tool: str, objects: list[Path]) -> dict[str, int]:
    """Bytes of text / rodata / data / bss summed over ``objects`` (``size -A``)."""
    p = subprocess.run([tool, "-A", *map(str, objects)], capture_output=True, text=True,
                       timeout=120)
    if p.returncode != 0:
        raise ConversionError(f"{tool} -A failed: {p.stderr.strip()[-500:]}",
                              where=", ".join(o.name for o in objects),
                              fix="check the cross toolchain (binutils) installation")
    out = {"text": 0, "rodata": 0, "data": 0, "bss": 0}
    for line in p.stdout.splitlines():
        parts = line.split()
        if len(parts) != 3 or not parts[1].isdigit():
            continue
        kind = section_kind(parts[0])
        if kind:
            out[kind] += int(parts[1])
    return out


def section_kind(name: str) -> str | None:
    """Which of text / rodata / data / bss an object's section adds to, or None (debug
    info, attributes, comments: nothing on the device)."""
    if name.startswith((".text", ".ARM.exidx", ".ARM.extab")):
        return "text"
    if name.startswith(".rodata"):
        return "rodata"
    if name.startswith(".data"):
        return "data"
    if name.startswith(".bss") or name == "COMMON":
        return "bss"
    return None


def deepest_stack(ci_files) -> int:
    """Bytes of the deepest call chain from an API function, from gcc's call-graph files
    (nodes carry 'N bytes (static)'; functions without a size, such as libc's, count 0;
    recursion is cut where a function reappears on the chain)."""
    frames: dict[str, int] = {}
    calls: dict[str, set[str]] = {}
    for f in ci_files:
        text = Path(f).read_text()
        for name, size in re.findall(r'node: \{ title: "([^"]+)" label: "[^"]*?\\n(\d+) bytes',
                                     text):
            frames[name] = max(frames.get(name, 0), int(size))
        for a, b in re.findall(r'edge: \{ sourcename: "([^"]+)" targetname: "([^"]+)"', text):
            calls.setdefault(a, set()).add(b)
    memo: dict[str, int] = {}

    def depth(fn: str, chain: frozenset[str]) -> int:
        if fn in memo:
            return memo[fn]
        below = [depth(c, chain | {fn}) for c in calls.get(fn, ()) if c not in chain]
        memo[fn] = frames.get(fn, 0) + max(below, default=0)
        return memo[fn]

    return max((depth(r, frozenset()) for r in API_ROOTS), default=0)


def library_sources(folder: Path) -> list[str]:
    """The Makefile's SRCS: every source of the model library (bench_main.c is not one)."""
    m = re.search(r"^SRCS = (.*)$", (folder / "Makefile").read_text(), re.M)
    if not m:
        raise ConversionError("the generated Makefile has no SRCS line", where=str(folder),
                              fix="regenerate the folder with `edgesmith build`")
    return m.group(1).split()


def _compile(folder: Path, src: str, out: Path, cc: str, cflags: str) -> Path:
    obj = out / (src.replace("/", "_")[:-2] + ".o")
    cmd = [*shlex.split(cc), *shlex.split(cflags), "-std=c99", "-fcallgraph-info=su", "-c",
           str(folder / src), "-o", str(obj)]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=folder)
    except OSError as e:
        raise UsageError(f"cannot run {cc!r}: {e.strerror}", where="c target options: cross_cc",
                         fix="install the cross compiler (apt-get install gcc-arm-none-eabi)"
                         ) from None
    if p.returncode != 0:
        raise ConversionError(f"{cc} could not compile {src} for the size check: "
                              f"{p.stderr.strip()[-1000:]}", where=str(folder / src),
                              fix="check cross_cflags in the profile's c target options")
    return obj


def _elf_machine(obj: Path) -> bytes:
    """An object's ELF class, byte order and e_machine (b"" if it is no ELF file)."""
    with open(obj, "rb") as f:
        head = f.read(20)
    return head[4:6] + head[18:20] if head[:4] == b"\x7fELF" else b""


def _define(header: str, name: str) -> int:
    m = re.search(rf"#define {name} (\d+)u", header)
    return int(m.group(1)) if m else 0
