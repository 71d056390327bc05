"""weights.bin fuzzing of the generated C runtime: 10,000+ mutations under ASan+UBSan."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from edgesmith.convert.export import export_onnx
from edgesmith.pipeline.model import load
from edgesmith.targets import codegen
from tests.conftest import DIGITS_ARCH

FUZZER = Path(__file__).parent / "c" / "weights_fuzz.c"
ROUNDS = 12_000


def _sources(folder: Path) -> list[str]:
    """The model's C sources, as its generated Makefile lists them (minus bench_main)."""
    srcs = re.search(r"^SRCS = (.*)$", (folder / "Makefile").read_text(), re.M).group(1)
    return [str(folder / s) for s in srcs.split()]


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_mutated_weights_files_never_crash_and_are_rejected(tmp_path, precision):
    onnx_path = export_onnx(load(DIGITS_ARCH).torch_model, (1, 1, 8, 8), tmp_path / "m.onnx")
    if precision == "int8":
        import numpy as np

        from edgesmith.compress.calibration import CalibrationSet
        from edgesmith.convert.onnx_qdq import quantize_qdq

        x = np.random.default_rng(0).uniform(-1, 1, (32, 1, 8, 8)).astype(np.float32)
        onnx_path = quantize_qdq(onnx_path, CalibrationSet(x=x), tmp_path / "q.onnx")
    folder = tmp_path / "c"
    codegen.from_onnx(onnx_path, folder, precision=precision)
    binary = tmp_path / "fuzz"
    subprocess.run(["cc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-O1", "-g",
                    "-fsanitize=address,undefined",
                    "-fno-sanitize-recover=all", "-I", str(folder), *_sources(folder),
                    str(FUZZER), "-o", str(binary), "-lm"], check=True)
    p = subprocess.run([str(binary), str(folder / "weights.bin"), str(tmp_path / "w.bin"),
                        str(ROUNDS), "7"], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]  # ASan/UBSan abort with a report
    out = json.loads(p.stdout)
    assert out["rounds"] == ROUNDS
    assert out["accepted_outside_padding"] == 0, out
    assert out["rejected"] >= ROUNDS * 0.7, out
