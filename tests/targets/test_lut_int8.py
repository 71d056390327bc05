"""Quantized element-wise functions (HardSwish, Sigmoid, Tanh, GELU, ...) run as one 256-entry
table lookup per byte (es_lut_i8), not dequantize -> float -> quantize: the vector paths
equal the plain loop in every build flavour, and a DQ -> op -> Q graph gives onnxruntime's
codes for every one of the 256 input codes."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests.targets.test_int8_fast import FLAVOURS, RT, _cpu_has

CHECK = Path(__file__).parent / "c" / "lut_check.c"
VBMI = pytest.param("avx512vbmi", "cc", ["-O3", "-mavx512f", "-mavx512bw", "-mavx512vbmi"], [],
                    marks=pytest.mark.skipif(not _cpu_has("avx512vbmi"),
                                             reason="this CPU has no AVX-512 VBMI"))


@pytest.mark.parametrize(("name", "cc", "flags", "wrapper"), [*FLAVOURS, VBMI])
def test_table_lookup_vector_paths_equal_the_plain_loop(name, cc, flags, wrapper, tmp_path):
    b = tmp_path / f"lut_{name}"
    subprocess.run([cc, *flags, "-std=c99", "-Wall", "-Wextra", "-Werror", f"-I{RT}",
                    str(CHECK), str(RT / "kernels/lut_int8.c"), "-o", str(b)], check=True)
    for seed in (1, 2):
        p = subprocess.run([*wrapper, str(b), str(seed)], capture_output=True, text=True,
                           timeout=120)
        assert p.returncode == 0 and p.stdout.startswith("ok"), p.stdout + p.stderr


X_SCALE, X_ZP, Y_ZP = 0.0625, 3, -5  # inputs -8.2 .. 7.8: every function's curved part


def _qdq_unary(path: Path, op: str, y_scale: float, opset: int = 17, act: str | None = None,
               **attrs) -> Path:
    """input -> Q -> DQ -> op [-> act] -> Q -> DQ -> output, per-tensor int8 throughout."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    inits = [numpy_helper.from_array(np.array(X_SCALE, np.float32), "xs"),
             numpy_helper.from_array(np.array(X_ZP, np.int8), "xz"),
             numpy_helper.from_array(np.array(y_scale, np.float32), "ys"),
             numpy_helper.from_array(np.array(Y_ZP, np.int8), "yz")]
    nodes = [helper.make_node("QuantizeLinear", ["input", "xs", "xz"], ["xq"], name="q_in"),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xf"], name="dq_in"),
             helper.make_node(op, ["xf"], ["f"], name=f"the_{op.lower()}", **attrs)]
    last = "f"
    if act:
        nodes.append(helper.make_node(act, ["f"], ["fa"], name="act"))
        last = "fa"
    nodes += [helper.make_node("QuantizeLinear", [last, "ys", "yz"], ["yq"], name="q_out"),
              helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["output"], name="dq")]
    g = helper.make_graph(nodes, "lut", [helper.make_tensor_value_info(
        "input", TensorProto.FLOAT, [1, 4, 8, 8])], [helper.make_tensor_value_info(
            "output", TensorProto.FLOAT, [1, 4, 8, 8])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 9
    onnx.checker.check_model(m)
    onnx.save(m, str(path))
    return path


# (op, output scale, opset, attributes, fused activation after it); the output scales
# cover each function's range in 256 codes
CASES = [("HardSwish", 0.04, 17, {}, None), ("HardSigmoid", 1 / 255, 17, {}, None),
         ("HardSigmoid", 1 / 255, 17, {"alpha": 0.25, "beta": 0.4}, None),
         ("LeakyRelu", 0.04, 17, {"alpha": 0.1}, None), ("Sigmoid", 1 / 255, 17, {}, None),
         ("Tanh", 1 / 127, 17, {}, None), ("Gelu", 0.035, 20, {}, None),
         ("Gelu", 0.035, 20, {"approximate": "tanh"}, None), ("Erf", 1 / 127, 17, {}, None),
         ("Elu", 0.04, 17, {"alpha": 0.5}, None), ("Softplus", 0.04, 17, {}, None),
         ("HardSwish", 0.04, 17, {}, "Relu")]


@pytest.mark.parametrize(("op", "y_scale", "opset", "attrs", "act"), CASES)
def test_quantized_function_is_one_table_lookup_matching_onnxruntime(
        op, y_scale, opset, attrs, act, tmp_path):
    """Each input code's output code equals onnxruntime's unfused DQ -> op -> Q (float32
    arithmetic between them), exactly for the piecewise-linear functions; for the
    transcendental ones onnxruntime's own approximations may put a value that lies within
    float32 rounding of a code boundary one code away, on at most 2 of the 256."""
    from edgesmith.targets import run
    from edgesmith.targets.ir import lower
    from tests.targets._helpers import generate, ort_run

    src = _qdq_unary(tmp_path / "m.onnx", op, y_scale, opset, act, **attrs)
    fns = [c.fn for st in lower(src, "int8").steps for c in st.calls]
    # the graph's float input and output are the only conversions
    assert fns == ["es_quantize_f32_i8", "es_lut_i8", "es_dequantize_i8_f32"], fns
    codes = np.arange(-128, 128, dtype=np.float32)
    x = ((codes - X_ZP) * np.float32(X_SCALE)).reshape(1, 4, 8, 8).astype(np.float32)
    out = generate(src, tmp_path / "c", precision="int8")
    got = np.rint(run.run(out, x) / np.float32(y_scale)).astype(int) + Y_ZP
    want = np.rint(ort_run(src, x, "ORT_ENABLE_BASIC") / np.float32(y_scale)).astype(int) + Y_ZP
    diff = np.abs(got - want)
    if op in ("HardSwish", "HardSigmoid", "LeakyRelu"):
        assert diff.max() == 0, np.argwhere(diff)
    else:
        assert diff.max() <= 1 and (diff > 0).sum() <= 2, np.argwhere(diff)
    if act == "Relu":
        assert got.min() >= Y_ZP
