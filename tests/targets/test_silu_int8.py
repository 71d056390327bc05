"""A quantized SiLU, DQ(x) -> Sigmoid -> Q -> DQ -> Mul(DQ(x), .) -> Q (EfficientNet's
activation as PyTorch exports it), runs as one table lookup over x instead of a Sigmoid
table and an int8 Mul, and gives the unfused int8 steps' bytes for every input code."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

X_SCALE, X_ZP = 0.0625, 3  # inputs -8.2 .. 7.8
S_SCALE, S_ZP = 1 / 256, -128  # the Sigmoid's output, 0 .. 1
Y_SCALE, Y_ZP = 0.035, -100  # SiLU: -0.28 .. 7.8


def _qdq_silu(path: Path, sigmoid_first: bool = False, act: str | None = None,
              sigmoid_also_out: bool = False) -> Path:
    """input -> Q -> DQ(x) -> Sigmoid -> Q -> DQ(s) -> Mul(x, s) [-> act] -> Q -> DQ ->
    output, per-tensor int8; ``sigmoid_first`` multiplies Mul(s, x); ``sigmoid_also_out``
    makes DQ(s) a second graph output (another reader of the Sigmoid's codes)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    inits = [numpy_helper.from_array(np.array(v, dt), n) for n, v, dt in (
        ("xs", X_SCALE, np.float32), ("xz", X_ZP, np.int8), ("ss", S_SCALE, np.float32),
        ("sz", S_ZP, np.int8), ("ys", Y_SCALE, np.float32), ("yz", Y_ZP, np.int8))]
    mul_in = ["sf", "xf"] if sigmoid_first else ["xf", "sf"]
    nodes = [helper.make_node("QuantizeLinear", ["input", "xs", "xz"], ["xq"], name="q_in"),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xf"], name="dq_in"),
             helper.make_node("Sigmoid", ["xf"], ["s"], name="sigmoid"),
             helper.make_node("QuantizeLinear", ["s", "ss", "sz"], ["sq"], name="q_s"),
             helper.make_node("DequantizeLinear", ["sq", "ss", "sz"], ["sf"], name="dq_s"),
             helper.make_node("Mul", mul_in, ["m"], name="silu_mul")]
    last = "m"
    if act:
        nodes.append(helper.make_node(act, ["m"], ["ma"], name="act"))
        last = "ma"
    nodes += [helper.make_node("QuantizeLinear", [last, "ys", "yz"], ["yq"], name="q_out"),
              helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["output"], name="dq")]
    shape = [1, 4, 8, 8]
    outs = [helper.make_tensor_value_info("output", TensorProto.FLOAT, shape)]
    if sigmoid_also_out:
        outs.append(helper.make_tensor_value_info("sf", TensorProto.FLOAT, shape))
    g = helper.make_graph(nodes, "silu", [helper.make_tensor_value_info(
        "input", TensorProto.FLOAT, shape)], outs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9
    onnx.checker.check_model(m)
    onnx.save(m, str(path))
    return path


def _every_code() -> np.ndarray:
    """the 256 int8 input codes, dequantized, as the [1, 4, 8, 8] input"""
    codes = np.arange(-128, 128, dtype=np.float32)
    return ((codes - X_ZP) * np.float32(X_SCALE)).reshape(1, 4, 8, 8).astype(np.float32)


def _fns(src: Path, **kw) -> list[str]:
    from edgesmith.targets.ir import lower

    return [c.fn for st in lower(src, "int8", **kw).steps for c in st.calls]


@pytest.mark.parametrize(("sigmoid_first", "act"), [(False, None), (True, None),
                                                     (False, "Relu")])
def test_quantized_silu_is_one_table_lookup_with_the_unfused_steps_bytes(
        sigmoid_first, act, tmp_path):
    from edgesmith.targets import codegen, run
    from edgesmith.targets.ir import lower
    from edgesmith.targets.planner import plan

    src = _qdq_silu(tmp_path / "m.onnx", sigmoid_first, act)
    assert _fns(src) == ["es_quantize_f32_i8", "es_lut_i8", "es_dequantize_i8_f32"]
    # the oracle: the reference kernels run the Sigmoid table and the int8 Mul apart
    ref = lower(src, "int8", kernels="reference")
    assert "es_mul_i8" in [c.fn for st in ref.steps for c in st.calls]
    codegen.generate(ref, plan(ref), tmp_path / "ref")
    run.build(tmp_path / "ref")
    x = _every_code()
    fused = run.run(codegen.from_onnx(src, tmp_path / "fused", precision="int8").out_dir, x)
    assert np.array_equal(fused, run.run(tmp_path / "ref", x))
    got = np.rint(fused / np.float32(Y_SCALE)).astype(int) + Y_ZP
    assert len(np.unique(got)) > 100  # the table is not degenerate: most codes differ
    if act == "Relu":
        assert got.min() >= Y_ZP


def test_silu_whose_sigmoid_has_another_reader_keeps_both_steps(tmp_path):
    src = _qdq_silu(tmp_path / "m.onnx", sigmoid_also_out=True)
    fns = _fns(src)
    assert "es_mul_i8" in fns and fns.count("es_lut_i8") == 1, fns
