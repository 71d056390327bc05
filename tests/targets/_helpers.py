"""Helpers shared by the C runtime tests (imported by conftest and test modules)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
HARNESS = Path(__file__).parent / "c"


def export(model, x, path: Path) -> Path:
    import torch

    torch.onnx.export(model, x, str(path), dynamo=False, opset_version=17,
                      input_names=["input"], output_names=["output"],
                      dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}})
    return path


def _load(folder: str, name: str):
    sys.path.insert(0, str(ROOT / "examples" / folder))
    try:
        import importlib

        mod = importlib.import_module("model")
        importlib.reload(mod)
        return mod
    finally:
        sys.path.pop(0)
        sys.modules.pop("model", None)




def c_int8_result(tmp_path: Path, figures: dict):
    """A build's c-int8 result carrying a plan's figures (Plan.figures()), as check_budgets
    sees it after a conversion: the folder holds a generated model.c and nothing else."""
    from edgesmith.artifact import Artifact
    from edgesmith.pipeline.stages import TargetResult

    folder = tmp_path / "c-int8"
    folder.mkdir()
    (folder / "model.c").write_text("/* generated */\n")
    spec = type("Spec", (), {"name": "c-int8"})()
    return TargetResult(spec, Artifact.of(folder, "c", "int8", **figures), None, "ok")


def _qdq(fp32: Path, calib_x: np.ndarray, out: Path) -> Path:
    from edgesmith.compress.calibration import CalibrationSet
    from edgesmith.convert.onnx_qdq import quantize_qdq

    return quantize_qdq(fp32, CalibrationSet(np.ascontiguousarray(calib_x)), out)


def generate(src: Path, out: Path, **kw) -> Path:
    from edgesmith.targets import codegen, run

    if out.exists():
        shutil.rmtree(out)
    codegen.from_onnx(src, out, **kw)
    run.build(out)
    return out



def ort_run(path: Path, x: np.ndarray, level: str = "ORT_ENABLE_ALL") -> np.ndarray:
    """onnxruntime's output; ``level``: its graph optimisation (ORT_ENABLE_BASIC leaves the
    QDQ nodes unfused, so every op runs in float between them)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    return sess.run(None, {sess.get_inputs()[0].name: x})[0]



def output_scale(qdq: Path) -> float:
    import onnx

    m = onnx.load(str(qdq))
    out = m.graph.output[0].name
    dq = next(n for n in m.graph.node if out in n.output)
    init = {i.name: i for i in m.graph.initializer}
    return float(onnx.numpy_helper.to_array(init[dq.input[1]]))



def model_sources(folder: Path) -> list[str]:
    import re

    text = (folder / "Makefile").read_text()
    srcs = re.search(r"^SRCS = (.*)$", text, re.M).group(1).split()
    return [str(folder / s) for s in srcs]



def compile_harness(folder: Path, out: Path, flags: list[str] | None = None,
                    cc: str = "cc") -> Path:
    import subprocess

    cmd = [cc, "-std=c99", "-Wall", "-Wextra", "-Werror", *(flags or ["-O1"]), "-I", str(folder),
           *model_sources(folder), str(HARNESS / "harness.c"), "-o", str(out), "-lm", "-ldl"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return out
