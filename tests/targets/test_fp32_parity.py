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


def _unsupported(case: str) -> list[tuple[str, str]]:
    """(node, op) the C runtime has no kernel for: op types it lacks, 3-D conv/pool; and
    (input, "not float32") for non-float inputs (Embedding's indices)."""
    from edgesmith.targets.c_target import CTarget

    m = onnx.load(str(BACKEND / case / "model.onnx"))
    t = CTarget()
    inits = {i.name for i in m.graph.initializer}
    out = [(i.name, "not float32") for i in m.graph.input if i.name not in inits
           and i.type.tensor_type.elem_type != onnx.TensorProto.FLOAT]
    for n in m.graph.node:
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
        if t.compat(n.op_type, attrs, "fp32").status == "unsupported":
            out.append((n.name, n.op_type))
    return out


SUPPORTED = [c for c in CASES if not _unsupported(c)]
UNSUPPORTED = [c for c in CASES if _unsupported(c)]


@pytest.mark.slow
@pytest.mark.parametrize("case", SUPPORTED)
def test_backend_model_matches_reference_output(case, tmp_path):
    d = BACKEND / case
    x = numpy_helper.to_array(onnx.load_tensor(str(d / "test_data_set_0" / "input_0.pb")))
    ref = numpy_helper.to_array(onnx.load_tensor(str(d / "test_data_set_0" / "output_0.pb")))
    out = generate(d / "model.onnx", tmp_path / "c")
    assert rel_err(run.run(out, x), ref) <= 1e-4


@pytest.mark.parametrize("case", UNSUPPORTED)
def test_backend_model_with_unsupported_op_is_rejected_naming_node_and_op(case):
    """The compat rules flag these models; lowering must refuse them with an error that
    names the offending node and op, never generate wrong code."""
    name, op = _unsupported(case)[0]
    with pytest.raises(UnsupportedOpError) as e:
        lower(BACKEND / case / "model.onnx")
    msg = str(e.value)
    assert op in msg and (name in msg or not name), msg


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


# (mode, coordinate_transformation_mode, nearest_mode): x2 and x3 upsampling puts output
# coordinates exactly on .5 for asymmetric nearest, where the rounding modes differ
RESIZE_MODES = [("nearest", c, r) for c in ("asymmetric", "half_pixel", "align_corners")
                for r in ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")] + [
    ("linear", c, "round_prefer_floor") for c in ("half_pixel", "asymmetric", "align_corners",
                                                  "pytorch_half_pixel")]


@pytest.mark.parametrize(("mode", "coord", "nearest"), RESIZE_MODES,
                         ids=["-".join(m) for m in RESIZE_MODES])
def test_resize_matches_onnxruntime_in_each_coordinate_and_rounding_mode(mode, coord, nearest,
                                                                        tmp_path):
    from onnx import TensorProto, helper, numpy_helper

    scales = numpy_helper.from_array(np.array([1, 1, 2, 3], np.float32), "scales")
    node = helper.make_node("Resize", ["x", "", "scales"], ["y"], name="resize", mode=mode,
                            coordinate_transformation_mode=coord, nearest_mode=nearest)
    g = helper.make_graph([node], "g", [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 5, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 10, 12])], [scales])
    src = tmp_path / "resize.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(src))
    x = np.random.default_rng(0).normal(size=(1, 2, 5, 4)).astype(np.float32)
    out = generate(src, tmp_path / "c")
    assert rel_err(run.run(out, x), ort_run(src, x)) <= 1e-6
