"""A generated C folder run on an emulated Cortex-M: correctness on the MCU, not only sizes.

The folder's model library, cross-compiled for the core (the kernels take the paths the
device takes: SXTB16 + SMLAD on the Cortex-M7's DSP extension, Helium/MVE on the
Cortex-M55), is linked with the bare-metal harness in ``runtime/mcu/`` (vector table,
reset handler, the board's linker script, a semihosted main) and run in
``qemu-system-arm``; semihosting reads ``input.raw`` and writes ``output.raw`` in the
run's directory. Each input sample is one run of the image.

The board follows the compiler flags, the same flag that picks the kernels: flags whose
compiler predefines ``__ARM_FEATURE_MVE`` (``-mcpu=cortex-m55``) run on ``mps3-an547``
(Cortex-M55), any other on ``mps2-an500`` (Cortex-M7).

    python -m edgesmith.targets.mcu_qemu build/m7/targets/c-int8 --input x.npy [--output y.npy]
        [--cflags "-O2 -mcpu=cortex-m55 -mthumb -mfloat-abi=hard"]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edgesmith.errors import ConversionError, DeviceError, EdgesmithError, UsageError

from .int8_input import raw_input
from .isa import MVE, is_mcu, macros
from .mcu_size import library_sources

HARNESS = Path(__file__).parent / "runtime" / "mcu"
MACHINE = "mps2-an500"  # QEMU's Cortex-M7 board
CC = "arm-none-eabi-gcc"
CFLAGS = "-O2 -mcpu=cortex-m7 -mthumb -mfloat-abi=hard -mfpu=fpv5-d16"
M55_CFLAGS = "-O2 -mcpu=cortex-m55 -mthumb -mfloat-abi=hard"  # Helium (MVE) and its FPU


@dataclass(frozen=True)
class Board:
    """A QEMU board model the image runs on: its machine name, linker script, memory."""

    machine: str
    script: str
    memory: str  # what the linker's region-overflow fix names


BOARDS = {"m7": Board(MACHINE, "mps2_an500.ld", "4 MB flash / 4 MB RAM"),
          "m55": Board("mps3-an547", "mps3_an547.ld",
                       "512 KB ITCM for code, 8 MB QSPI flash for constants / 4 MB RAM")}


def board_for(cc: str, cflags: str) -> Board:
    """mps3-an547 (Cortex-M55) when ``cc cflags`` targets Helium, else mps2-an500 (M7)."""
    return BOARDS["m55" if MVE in macros(cc, cflags) else "m7"]


def check_flags(cc: str, cflags: str) -> None:
    """A usage error (exit 2) when ``cc`` rejects ``cflags`` or they name no Cortex-M core:
    the link would otherwise fail with the compiler's list of CPUs, or the image fault."""
    isa = macros(cc, cflags)
    if not isa:
        raise UsageError(f"{cc} rejects the flags {cflags!r}", where="--cflags",
                         fix=f"pass the profile's cross_cflags, e.g. {CFLAGS!r} (Cortex-M7) "
                             f"or {M55_CFLAGS!r} (Cortex-M55)")
    if not is_mcu(isa):
        raise UsageError(f"the flags {cflags!r} do not target a Cortex-M core", where="--cflags",
                         fix="add -mcpu=cortex-m7 (or cortex-m55 for Helium) and -mthumb")
QEMU = "qemu-system-arm"
INSTALL_FIX = "apt-get install qemu-system-arm gcc-arm-none-eabi libnewlib-arm-none-eabi " \
              "(make system-deps installs them)"


def build_image(folder: Path, out: Path, cc: str = CC, cflags: str = CFLAGS) -> Path:
    """``out`` (an ELF): the folder's model library + the harness, linked for the board
    ``cflags`` pick (board_for) with newlib's semihosting (rdimon) and no start files but
    the harness's own."""
    if shutil.which(cc) is None:
        raise UsageError(f"{cc} is not on this machine's PATH", where="mcu_qemu",
                         fix=INSTALL_FIX)
    check_flags(cc, cflags)
    folder, board = Path(folder), board_for(cc, cflags)
    srcs = [str(folder / s) for s in library_sources(folder)]
    cmd = [cc, *cflags.split(), "-std=c99", "-Wall", "-Wextra", "-Werror", "-I", str(folder),
           *srcs, str(HARNESS / "startup.c"), str(HARNESS / "qemu_main.c"),
           "-T", str(HARNESS / board.script), "--specs=rdimon.specs", "-nostartfiles",
           "-lm", "-o", str(out)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise ConversionError(f"linking the {board.machine} image failed: "
                              f"{p.stderr.strip()[-1500:]}", where=str(folder),
                              fix="a region overflow means the model does not fit the board's "
                                  f"{board.memory}; otherwise report a bug")
    return Path(out)


def run_image(elf: Path, x: np.ndarray, out_elems: int, timeout: float = 120,
              machine: str = MACHINE) -> np.ndarray:
    """One run of ``elf`` in QEMU's ``machine`` on ``x`` (the model's input 0 as raw
    bytes: float32, or int8 for an ``input: int8`` model; see int8_input.raw_input)
    -> output 0."""
    if shutil.which(QEMU) is None:
        raise UsageError(f"{QEMU} is not on this machine's PATH", where="mcu_qemu",
                         fix=INSTALL_FIX)
    with tempfile.TemporaryDirectory(prefix="es_qemu_") as tmp:
        np.ascontiguousarray(x).tofile(Path(tmp) / "input.raw")
        cmd = [QEMU, "-M", machine, "-nographic", "-monitor", "none", "-serial", "none",
               "-semihosting-config", "enable=on,target=native",
               "-kernel", str(Path(elf).resolve())]
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=tmp)
        except subprocess.TimeoutExpired:
            raise DeviceError(f"{QEMU} -M {machine} ran past {timeout:.0f} s", where=str(elf),
                              fix="a hang on the emulated MCU: rerun with a larger timeout, "
                                  "or report a bug") from None
        line = next((ln for ln in p.stdout.splitlines() if ln.startswith("{")), "")
        result = json.loads(line) if line else {}
        if p.returncode != 0 or not result.get("ok"):
            why = result.get("error") or (p.stderr.strip()[-500:] or
                                          ("a fault (exit 3)" if p.returncode == 3 else ""))
            raise DeviceError(f"the {machine} image failed (exit {p.returncode}): {why}",
                              where=str(elf), fix="see the message; report a bug if the "
                                                  "host build of the same folder runs")
        y = np.fromfile(Path(tmp) / "output.raw", dtype="<f4")
    if y.size != out_elems:
        raise DeviceError(f"output.raw has {y.size} values, model.h says {out_elems}",
                          where=str(elf), fix="report a bug")
    return y


def run(folder: Path, x: np.ndarray, *, work: Path | None = None,
        cflags: str = CFLAGS) -> np.ndarray:
    """The model in ``folder`` run on the emulated Cortex-M ``cflags`` target (board_for),
    one image run per sample of ``x`` (a batch of the model's input shape, batch 1 each)
    -> stacked outputs."""
    from .run import io_shapes

    (ishape,), (oshape, *_) = io_shapes(folder)
    x = np.asarray(x, dtype=np.float32)
    samples = [x] if x.shape == ishape else [x[i:i + 1] for i in range(len(x))]
    if any(s.shape != ishape for s in samples):
        raise UsageError(f"input shape {x.shape} does not fit the model's {ishape}",
                         where="--input", fix="pass samples of the model's input shape")
    with tempfile.TemporaryDirectory(prefix="es_mcu_img_", dir=work) as tmp:
        elf = build_image(Path(folder), Path(tmp) / "model.elf", cflags=cflags)
        machine = board_for(CC, cflags).machine
        outs = [run_image(elf, raw_input(folder, s), int(np.prod(oshape)),
                          machine=machine).reshape(oshape) for s in samples]
    return np.concatenate(outs, axis=0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m edgesmith.targets.mcu_qemu",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", type=Path, help="a generated C folder (targets/c-int8)")
    ap.add_argument("--input", type=Path, required=True, help=".npy of input samples")
    ap.add_argument("--output", type=Path, help=".npy to write the outputs to")
    ap.add_argument("--cflags", default=CFLAGS, help="the profile's cross_cflags "
                    f"(default: the Cortex-M7's, {CFLAGS!r}; -mcpu=cortex-m55 runs on "
                    "mps3-an547)")
    a = ap.parse_args(argv)
    if not (a.folder / "model.h").is_file():
        print(f"error: {a.folder}: no model.h, not a generated C folder\n  fix: pass "
              "BUILD/targets/c-int8 of an `edgesmith build`", file=sys.stderr)
        return 2
    try:
        y = run(a.folder, np.load(a.input), cflags=a.cflags)
    except EdgesmithError as e:
        print(f"error: {e.message()}", file=sys.stderr)
        return e.exit_code
    except (OSError, ValueError) as e:
        print(f"error: cannot read {a.input}: {e}", file=sys.stderr)
        return 2
    if a.output:
        np.save(a.output, y)
    print(json.dumps({"samples": len(y), "machine": board_for(CC, a.cflags).machine,
                      "output_shape": list(y.shape)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
