"""FP32 generated C vs onnxruntime: the demo, the MobileNetV2-style model, and every
model in onnx's bundled pytorch-converted backend data whose ops the C runtime has."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from edgesmith.errors import UnsupportedOpError
from edgesmith.targets import run
from edgesmith.targets.ir import lower
from tests.targets._helpers import generate, ort_run

BACKEND = Path(onnx.__file__).parent / "backend/test/data/pytorch-converted"
CASES = sorted(os.listdir(BACKEND)) if BACKEND.exists() else []


def rel_err(y, ref) -> float:
    return float(np.abs(y - ref).max() / max(1e-6, np.abs(ref).max()))


def test_digits_fp32_matches_onnxruntime(digits_c, digits_onnx, digits_splits):
    x = digits_splits.val_x[:32]
    assert rel_err(run.run(digits_c, x), ort_run(digits_onnx, x)) <= 1e-4


@pytest.mark.slow
def test_mobilenetv2_fp32_matches_onnxruntime(work, mnv2_onnx, mnv2):
    out = generate(mnv2_onnx, work / "mnv2_c")
    x, _ = mnv2.sample_data(8, seed=5)
    assert rel_err(run.run(out, x), ort_run(mnv2_onnx, x)) <= 1e-4


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES)
def test_backend_model_matches_reference_output(case, tmp_path):
    d = BACKEND / case
    try:
        lower(d / "model.onnx")
    except UnsupportedOpError as e:
        pytest.skip(f"not supported by the C runtime: {e.what}")
    x = numpy_helper.to_array(onnx.load_tensor(str(d / "test_data_set_0" / "input_0.pb")))
    ref = numpy_helper.to_array(onnx.load_tensor(str(d / "test_data_set_0" / "output_0.pb")))
    out = generate(d / "model.onnx", tmp_path / "c")
    assert rel_err(run.run(out, x), ref) <= 1e-4


def test_unsupported_op_names_the_node(tmp_path):
    from onnx import TensorProto, helper

    node = helper.make_node("NonMaxSuppression", ["x", "s"], ["y"], name="nms_0")
    g = helper.make_graph([node], "g", [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 4]),
        helper.make_tensor_value_info("s", TensorProto.FLOAT, [1, 1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.INT64, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(UnsupportedOpError) as e:
        lower(m)
    assert "nms_0" in str(e.value) and "NonMaxSuppression" in str(e.value)
