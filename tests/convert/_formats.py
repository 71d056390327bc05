"""Helpers shared by the TFLite / OpenVINO / Core ML tests (imported, not a conftest)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import torch

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Bundle:
    """A trained digits model as the pipeline hands it to converters: files on disk."""

    module: torch.nn.Module
    onnx: Path
    torchscript: Path
    calib_x: np.ndarray
    val_x: np.ndarray
    val_y: np.ndarray
    spec: object


def export(module: torch.nn.Module, shape: tuple[int, ...], folder: Path,
           name: str = "model") -> tuple[Path, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    module = module.eval()
    x = torch.zeros(1, *shape)
    path = folder / f"{name}.onnx"
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, x, str(path), dynamo=False, opset_version=17,
                          input_names=["input"], output_names=["output"],
                          dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}})
    onnx.checker.check_model(str(path))
    ts = folder / f"{name}.ts"
    torch.jit.trace(module, x).save(str(ts))
    return path, ts


def digits_bundle(ckpt: Path, folder: Path) -> Bundle:
    from edgesmith.pipeline.data import digits

    sys.path.insert(0, str(ROOT / "examples" / "digits"))
    try:
        from model import build
    finally:
        sys.path.pop(0)
    module = build()
    module.load_state_dict(torch.load(ckpt, weights_only=True))
    module.eval()
    s = digits()
    path, ts = export(module, s.spec.shape, folder, "digits")
    return Bundle(module, path, ts, s.calib_x[:100], s.val_x, s.val_y, s.spec)


def make_ctx(target_cls, fmt: str, precision: str, onnx_path: Path, calib_x: np.ndarray,
             folder: Path, *, spec=None, torchscript: Path | None = None, qdq_onnx=None,
             work_dir: Path | None = None, **options):
    from edgesmith.compress.calibration import CalibrationSet
    from edgesmith.pipeline.data import InputSpec
    from edgesmith.profiles.schema import TargetSpec
    from edgesmith.target import ConvertContext

    name = f"{fmt}-{precision}-{'-'.join(f'{k}{v}' for k, v in options.items())}".rstrip("-")
    calib = CalibrationSet(x=np.ascontiguousarray(calib_x, dtype=np.float32))
    static_qdq = None
    if precision == "int8" and target_cls.uses_static_qdq:  # as the pipeline makes it
        from edgesmith.convert.onnx_qdq import quantize_qdq

        static_qdq = quantize_qdq(onnx_path, calib, folder / "work" / f"{name}_qdq.onnx")
    return ConvertContext(
        fp32_onnx=onnx_path,
        spec=spec or InputSpec(shape=tuple(calib_x.shape[1:])),
        calib=calib,
        target=TargetSpec(format=fmt, precision=precision),
        options=target_cls.Options(**options),
        profile=None,
        out_dir=folder / "targets" / name,
        work_dir=work_dir or folder / "work",
        log_path=folder / "logs" / f"{name}.log",
        torchscript=torchscript,
        qdq_onnx=qdq_onnx,
        static_qdq=static_qdq,
    )


def onnx_run(path: Path, x: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return sess.run(None, {sess.get_inputs()[0].name: np.asarray(x, np.float32)})[0]


def top1(y: np.ndarray, labels: np.ndarray) -> float:
    return float((y.argmax(1) == labels).mean())


def custom_op_onnx(path: Path) -> Path:
    """A well-formed ONNX file whose only node lives in a custom domain no converter knows."""
    from onnx import TensorProto, helper

    node = helper.make_node("Frobnicate", ["input"], ["output"], name="my_custom",
                            domain="com.example")
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 1, 4, 4])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 1, 4, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.example", 1)])
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path
