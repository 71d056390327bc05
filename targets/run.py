"""Build a generated C folder with the host compiler and run it on numpy inputs.

Used by validation (the target's ``runner``), the tests and the benchmark. Inputs are
written as raw float32, ``edgesmith_bench --input --output`` runs the model, outputs are
read back. A model generated for batch 1 is looped over the batch inside one process
(``--samples N``): starting a process per sample cost ~54 ms of CPU each, more than the
inference of a small model, and validation runs hundreds of samples per C target.
"""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from edgesmith.errors import ConversionError

from .int8_input import raw_input


def build(folder: Path, *, cc: str | None = None, cflags: str | None = None,
          target: str = "edgesmith_bench", log=None, timeout: float = 600) -> Path:
    """``make`` in ``folder`` (CC/CFLAGS override the Makefile's); returns the binary."""
    folder = Path(folder)
    cmd = ["make", "-s", "-C", str(folder), target, f"-j{_jobs()}"]
    if cc:
        cmd.append(f"CC={cc}")
    if cflags is not None:
        cmd.append(f"CFLAGS={cflags} -std=c99 -Wall -Wextra -Werror")
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if log:
        log(" ".join(cmd))
        log(p.stdout + p.stderr)
    if p.returncode != 0:
        raise ConversionError(f"C build failed: {(p.stderr or p.stdout)[-2000:]}",
                              where=str(folder), fix="see the build log; report a bug")
    return folder / target


def _jobs() -> int:
    import os

    return max(1, min(4, os.cpu_count() or 1))


def io_shapes(folder: Path) -> tuple[list[tuple[int, ...]], list[tuple[int, ...]]]:
    """Input and output shapes, read back from model.h."""
    text = (Path(folder) / "model.h").read_text()
    ins = [tuple(json.loads(m)) for m in re.findall(  # int8_t: C option input: int8
        r"/\* input \d+: (?:float|int8_t) (\[.*?\]) \*/", text)]
    outs = [tuple(json.loads(m)) for m in re.findall(r"/\* output \d+: float (\[.*?\]) \*/",
                                                      text)]
    return ins, outs


def run_bench(binary: Path, args: list[str], *, wrapper: list[str] | None = None,
              cwd: Path | None = None, timeout: float = 600, env=None) -> dict:
    cmd = [*(wrapper or []), str(binary), *args]
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, timeout=timeout, env=env)
    if p.returncode != 0:
        raise ConversionError(f"edgesmith_bench failed ({p.returncode}): {p.stderr[-2000:]}",
                              where=str(binary))
    line = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    return json.loads(line[-1]) if line else {}


def run(folder: Path, x: np.ndarray, *, binary: Path | None = None,
        wrapper: list[str] | None = None) -> np.ndarray:
    """Run the generated model on ``x`` (float32, the model's layout) -> first output.

    ``x`` either has exactly the model's input shape, or a batch axis the model fixed
    to 1 (then the samples run one after another in one ``--samples`` process and the
    outputs are stacked)."""
    folder = Path(folder)
    binary = binary or folder / "edgesmith_bench"
    if not binary.exists():
        build(folder)
    (ishape,), oshapes = io_shapes(folder)
    x = np.ascontiguousarray(x, dtype=np.float32)
    if x.shape == ishape:
        return _run_samples(folder, binary, x, oshapes[0], wrapper, batched=False
                            ).reshape(oshapes[0])
    if ishape[0] == 1 and x.shape[1:] == ishape[1:]:
        if _has_samples_mode(folder):
            out = _run_samples(folder, binary, x, oshapes[0], wrapper, batched=True)
        else:  # a folder generated before --samples existed (a cached artifact)
            out = np.concatenate([_run_samples(folder, binary, x[i:i + 1], oshapes[0], wrapper,
                                               batched=False) for i in range(len(x))]
                                 or [np.zeros((0, int(np.prod(oshapes[0]))), np.float32)])
        return out.reshape(len(x) * oshapes[0][0], *oshapes[0][1:])
    raise ConversionError(f"input shape {x.shape} does not fit the model's {ishape}")


def _has_samples_mode(folder: Path) -> bool:
    """Whether the folder's harness knows ``--samples`` (folders generated before it
    existed, e.g. from the stage cache, run one process per sample)."""
    bench = Path(folder) / "bench_main.c"
    return not bench.exists() or b'"--samples"' in bench.read_bytes()


def _run_samples(folder: Path, binary: Path, x: np.ndarray, oshape: tuple[int, ...],
                 wrapper: list[str] | None, *, batched: bool) -> np.ndarray:
    """Every sample of ``x`` (batch-1 model: axis 0 counts samples) through one
    ``edgesmith_bench`` process -> output 0 of each sample, flat: (samples, size of
    output 0). ``batched`` False: ``x`` is one sample and runs through the single-sample
    path devices use."""
    n = len(x) if batched else 1
    per = int(np.prod(oshape))
    if n == 0:
        return np.zeros((0, per), np.float32)
    with tempfile.TemporaryDirectory(prefix="es_run_") as tmp:
        fin, fout = Path(tmp) / "in.raw", Path(tmp) / "out.raw"
        raw_input(folder, x).tofile(fin)  # quantized for an int8-input model
        args = ["--weights", str((folder / "weights.bin").resolve()),
                "--input", str(fin), "--output", str(fout)]
        args += ["--samples", str(n)] if batched else ["--runs", "1", "--warmup", "0",
                                                         "--no-power"]
        run_bench(binary.resolve(), args, wrapper=wrapper, cwd=folder)
        raw = np.fromfile(fout, dtype="<f4")
    if per == 0 or raw.size % n or raw.size // n < per:
        raise ConversionError(f"edgesmith_bench wrote {raw.size} floats for {n} samples; "
                              f"output 0 alone is {per} per sample", where=str(binary),
                              fix="rebuild the C folder; report a bug if it persists")
    return raw.reshape(n, -1)[:, :per]
