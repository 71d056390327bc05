"""Build a generated C folder with the host compiler and run it on numpy inputs.

Used by validation (the target's ``runner``), the tests and the benchmark. Inputs are
written as raw float32, ``edgesmith_bench --input --output`` runs one inference per
sample, outputs are read back. A model generated for batch 1 is looped over the batch.
"""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from edgesmith.errors import ConversionError


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
    ins = [tuple(json.loads(m)) for m in re.findall(r"/\* input \d+: float (\[.*?\]) \*/", text)]
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
    to 1 (then each sample runs separately and outputs are stacked)."""
    folder = Path(folder)
    binary = binary or folder / "edgesmith_bench"
    if not binary.exists():
        build(folder)
    (ishape,), oshapes = io_shapes(folder)
    x = np.ascontiguousarray(x, dtype=np.float32)
    if x.shape == ishape:
        samples, stacked = [x], False
    elif ishape[0] == 1 and x.shape[1:] == ishape[1:]:
        samples, stacked = [x[i:i + 1] for i in range(len(x))], True
    else:
        raise ConversionError(f"input shape {x.shape} does not fit the model's {ishape}")
    outs = []
    with tempfile.TemporaryDirectory(prefix="es_run_") as tmp:
        for i, s in enumerate(samples):
            fin, fout = Path(tmp) / f"in{i}.raw", Path(tmp) / f"out{i}.raw"
            s.astype("<f4").tofile(fin)
            run_bench(binary.resolve(), ["--weights", str((folder / "weights.bin").resolve()),
                                         "--input", str(fin), "--output", str(fout),
                                         "--runs", "1", "--warmup", "0", "--no-power"],
                      wrapper=wrapper, cwd=folder)
            raw = np.fromfile(fout, dtype="<f4")
            outs.append(raw[:int(np.prod(oshapes[0]))].reshape(oshapes[0]))
    return np.concatenate(outs, axis=0) if stacked else outs[0]
