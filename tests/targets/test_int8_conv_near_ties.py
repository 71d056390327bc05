"""An int8 Conv whose exact output lies a hair from a rounding tie: the C build rounds it
as the exact sum does, bit for bit as onnxruntime's fused QLinearConv, where
onnxruntime's unfused float Conv (DQ -> Conv -> Q) can round it the other way.

This is what int8_agreement's (b) meets on EfficientNet-B0 and MobileNetV3-small: every
sample whose output leaves onnxruntime starts at one such value (within 5e-6 of .5) of a
Conv that onnxruntime's fused graph still runs in float (its output read by two nodes),
and the C build had it right in 52 of 54. The test pins the C side: an integer sum times
the float32 scale, never a float sum, so a change that made C agree with onnxruntime's
float Conv on these inputs would fail here."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks import int8_agreement as agree  # noqa: E402
from benchmarks import qdq_float64  # noqa: E402
from edgesmith.targets import codegen, run  # noqa: E402
from tests.conftest import require_tools  # noqa: E402

# the scales of EfficientNet-B0's features.2.1 projection (trained, 32x32), whose
# 0.499999688 was the first value its C build and onnxruntime rounded apart
SX, SY = 0.02808208577334881, 0.07324933260679245
C, M, H, W = 144, 24, 16, 16


def _near_tie_conv(seed: int):
    """(QDQ model, float input, exact output as int8) of a 1x1 Conv C -> M on H x W."""
    from onnx import TensorProto, helper, numpy_helper

    r = np.random.default_rng(seed)
    w = r.integers(-127, 128, (M, C, 1, 1)).astype(np.int8)
    sw = (r.uniform(0.5, 2.0, M) * 2e-3).astype(np.float32)
    b = r.integers(-3000, 3000, M).astype(np.int32)
    arrays = {"sx": np.array(SX, np.float32), "zx": np.array(-120, np.int8), "w": w,
              "sw": sw, "zw": np.zeros(M, np.int8), "b": b,
              "sb": (np.float32(SX) * sw).astype(np.float32), "zb": np.zeros(M, np.int32),
              "sy": np.array(SY, np.float32), "zy": np.array(10, np.int8)}
    nodes = [helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xf"]),
             helper.make_node("DequantizeLinear", ["w", "sw", "zw"], ["wf"], axis=0),
             helper.make_node("DequantizeLinear", ["b", "sb", "zb"], ["bf"], axis=0),
             helper.make_node("Conv", ["xf", "wf", "bf"], ["yf"], name="conv"),
             helper.make_node("QuantizeLinear", ["yf", "sy", "zy"], ["yq"]),
             helper.make_node("DequantizeLinear", ["yq", "sy", "zy"], ["y"])]
    g = helper.make_graph(
        nodes, "near_ties", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, C, H, W])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, M, H, W])],
        [numpy_helper.from_array(v, k) for k, v in arrays.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    xq = r.integers(-128, 128, (C, H, W)).astype(np.int64)
    x = ((xq + 120) * np.float32(SX)).astype(np.float32)[None]
    acc = np.einsum("mk,khw->mhw", w[:, :, 0, 0].astype(np.int64), xq + 120) + b[:, None, None]
    exact = acc * (np.float64(np.float32(SX)) * sw.astype(np.float64))[:, None, None] / \
        np.float64(np.float32(SY))
    return m, x, exact


def _int8(y: np.ndarray) -> np.ndarray:
    return np.clip(np.round(y / np.float32(SY)) + 10, -128, 127).astype(np.int32)


# seeds whose inputs hold a value onnxruntime 1.x's float Conv rounds away from the exact
# sum (found by search; each of 40 seeds has ~0.1 such values among its 6144)
@pytest.mark.parametrize("seed", [9, 12])
@pytest.mark.parametrize("cflags", ["-O3 -march=native", "-O2"])
def test_c_int8_conv_rounds_near_ties_as_the_exact_sum(seed, cflags, tmp_path):
    require_tools("cc", "make")
    m, x, exact = _near_tie_conv(seed)
    path = tmp_path / "near_ties.onnx"
    path.write_bytes(m.SerializeToString())
    codegen.from_onnx(path, tmp_path / "c", precision="int8", cflags=cflags)
    c = _int8(run.run(tmp_path / "c", x)[0])
    want = np.clip(np.round(exact) + 10, -128, 127).astype(np.int32)
    fused = _int8(agree.ort_run(m, x)[0][0])
    unfused = _int8(agree.ort_run(m, x, "ORT_DISABLE_ALL")[0][0])
    assert np.array_equal(c, fused)  # onnxruntime's QLinearConv arithmetic, bit for bit
    assert np.array_equal(c, want), np.argwhere(c != want)
    # int8_agreement's float64 evaluation of the graph rounds them as the exact sum does
    assert np.array_equal(qdq_float64.run(m, x, ["yq"])["yq"][0].astype(np.int32), want)
    # the input has the bite it is kept for: a value the float path rounds the other way
    tie = np.abs(np.abs(exact - np.floor(exact)) - 0.5)
    assert (unfused != want).any() and tie[unfused != want].max() < 1e-4
