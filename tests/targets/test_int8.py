"""INT8 generated C vs onnxruntime on the same QDQ model (1-LSB agreement, top-1)."""

from __future__ import annotations

import numpy as np
import pytest

from edgesmith.targets import run
from tests.targets._helpers import generate, ort_run, output_scale


def _within(y: np.ndarray, ref: np.ndarray, lsb: float) -> float:
    return float((np.abs(y - ref) <= lsb * 1.001).mean())


def test_digits_int8_within_one_lsb_of_onnxruntime(digits_c_int8, digits_qdq, digits_splits):
    x = digits_splits.val_x
    y, ref = run.run(digits_c_int8, x), ort_run(digits_qdq, x)
    lsb = output_scale(digits_qdq)
    within = _within(y, ref, lsb)
    top1 = float((y.argmax(1) == ref.argmax(1)).mean())
    print(f"digits int8: within 1 LSB {within:.4%}, top-1 agreement {top1:.4%}")
    assert within >= 0.999
    assert top1 >= 0.995


def test_int8_model_uses_integer_kernels(digits_c_int8):
    body = (digits_c_int8 / "model.c").read_text().split("void es_run_step(")[1]
    for fn in ("es_conv2d_i8_gemm", "es_dwconv2d_i8_hwc", "es_add_i8", "es_fc_i8",
               "es_global_avgpool_i8"):
        assert fn in body
    assert "es_conv2d_f32" not in body


def test_fixed_point_requantization_matches_tflite_reference():
    from edgesmith.targets.lower.requant import quantize_multiplier

    for real in (0.0003, 0.02, 0.5, 0.99999, 1.7, 12.0):
        m, s = quantize_multiplier(real)
        assert 2**30 <= m < 2**31
        assert abs(m * 2.0 ** (s - 31) - real) <= real * 2**-30


@pytest.mark.slow
def test_mobilenetv2_int8_agrees_with_onnxruntime(work, mnv2_qdq, mnv2_onnx, mnv2):
    out = generate(mnv2_qdq, work / "mnv2_c_int8", precision="int8")
    x, _ = mnv2.sample_data(64, seed=11)
    y, ref = run.run(out, x), ort_run(mnv2_qdq, x)
    lsb = output_scale(mnv2_qdq)
    within = _within(y, ref, lsb)
    # the same QDQ model in onnxruntime with its QDQ fusions off (every op in float between
    # DequantizeLinear and QuantizeLinear): how far onnxruntime drifts from itself
    ort_self = _within(ort_run(mnv2_qdq, x, "ORT_ENABLE_BASIC"), ref, lsb)
    top1 = float((y.argmax(1) == ref.argmax(1)).mean())
    fp = ort_run(mnv2_onnx, x).argmax(1)
    ours_fp, ort_fp = float((y.argmax(1) == fp).mean()), float((ref.argmax(1) == fp).mean())
    print(f"mobilenetv2 int8: within 1 LSB {within:.4%} (onnxruntime unfused vs fused "
          f"{ort_self:.4%}), top-1 agreement {top1:.4%}; top-1 vs fp32: C {ours_fp:.2%}, "
          f"onnxruntime {ort_fp:.2%}")
    assert top1 >= 0.995
    assert ours_fp >= ort_fp - 0.05  # as faithful to the fp32 model as onnxruntime's int8
    # the criterion of issue 16 ("C runtime at the speed limit"), which replaced the 99.9 %
    # target on this random-weight net: end to end, at least onnxruntime's own fused-vs-
    # unfused agreement (per layer, test_int8_per_layer checks onnxruntime's own input)
    assert within >= ort_self  # closer to onnxruntime than onnxruntime's own unfused run
    assert within >= 0.99  # fp32 requantisation: 97.8% with TFLite's fixed point


@pytest.mark.slow
def test_fixed_point_requantization_builds_agree_with_onnxruntime(work, digits_qdq,
                                                                  digits_splits, mnv2_qdq,
                                                                  mnv2):
    """requant: fixed (TFLite's integer-only arithmetic, for cores without an FPU): digits
    within 1 LSB of onnxruntime, MobileNetV2-style within the drift of one rounding rule
    against another (onnxruntime requantises in fp32)."""
    out = generate(digits_qdq, work / "digits_c_fixed", precision="int8", requant="fixed")
    text = (out / "model.c").read_text()
    assert ".rq = ES_RQ_FIXED" in text and "ES_RQ_FP32" not in text  # every kernel call
    x = digits_splits.val_x
    y, ref = run.run(out, x), ort_run(digits_qdq, x)
    assert _within(y, ref, output_scale(digits_qdq)) >= 0.999
    assert float((y.argmax(1) == ref.argmax(1)).mean()) >= 0.995
    out = generate(mnv2_qdq, work / "mnv2_c_fixed", precision="int8", requant="fixed")
    x, _ = mnv2.sample_data(64, seed=11)
    y, ref = run.run(out, x), ort_run(mnv2_qdq, x)
    lsb = output_scale(mnv2_qdq)
    assert _within(y, ref, lsb) >= 0.95
    # top-1 only where onnxruntime's own top two are more than 2 LSB apart: the two rounding
    # rules differ by up to an LSB per value, so a closer pair may swap by right (one of 64
    # samples, at a 1.0 LSB margin, did on an Intel Xeon; 62 of 64 stand clear)
    top2 = np.sort(ref, axis=1)[:, -2:]
    clear = (top2[:, 1] - top2[:, 0]) > 2 * lsb
    assert clear.sum() >= 48, "too few samples with a clear top-1 to judge agreement"
    assert bool((y.argmax(1) == ref.argmax(1))[clear].all())


def _u8_qdq(fp32, calib_x, out):
    """An asymmetric uint8-activation QDQ model, the way NNCF's QAT export writes them."""
    from onnxruntime import quantization as q

    class R:
        def __init__(self):
            self.it = iter([{"input": calib_x[i:i + 16]} for i in range(0, len(calib_x), 16)])

        def get_next(self):
            return next(self.it, None)

    q.quantize_static(str(fp32), str(out), R(), quant_format=q.QuantFormat.QDQ,
                      per_channel=True, activation_type=q.QuantType.QUInt8,
                      weight_type=q.QuantType.QInt8)
    return out


def test_uint8_activation_qdq_lowers_to_integer_kernels_bit_exactly(work, digits_onnx,
                                                                    digits_splits):
    import onnx

    src = _u8_qdq(digits_onnx, digits_splits.calib_x[:64], work / "digits_u8.onnx")
    m = onnx.load(str(src))
    assert any(i.data_type == onnx.TensorProto.UINT8 for i in m.graph.initializer)
    out = generate(src, work / "digits_c_u8", precision="int8")
    body = (out / "model.c").read_text().split("void es_run_step(")[1]
    assert "es_conv2d_i8" in body and "es_conv2d_f32" not in body
    x = digits_splits.val_x[:128]
    y, ref = run.run(out, x), ort_run(src, x)
    lsb = output_scale(src)
    within = _within(y, ref, lsb)
    assert within >= 0.999
    assert float((y.argmax(1) == ref.argmax(1)).mean()) >= 0.99


def test_uint8_shift_preserves_every_quantized_value():
    """q_s8 = q_u8 - 128, zp_s8 = zp_u8 - 128 gives the same DQ(Q(x)) for every x."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    from onnx.reference import ReferenceEvaluator

    from edgesmith.targets.lower.qdq import shift_uint8_to_int8

    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], name="q0"),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], name="dq0")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                    [4096])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4096])],
                          [numpy_helper.from_array(np.array(0.037, np.float32), "s"),
                           numpy_helper.from_array(np.array(131, np.uint8), "z")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    x = np.random.default_rng(0).normal(0, 4, 4096).astype(np.float32)
    before = ReferenceEvaluator(m).run(None, {"x": x})[0]
    m2 = onnx.ModelProto()
    m2.CopyFrom(m)
    assert shift_uint8_to_int8(m2) == 2
    assert numpy_helper.to_array(m2.graph.initializer[-1]).dtype == np.int8
    after = ReferenceEvaluator(m2).run(None, {"x": x})[0]
    np.testing.assert_array_equal(before, after)


VNNI_FLAGS = "-O2 -mavx512f -mavx512bw -mavx512vl -mavx512vnni"


def _cpu_has_vnni() -> bool:
    from pathlib import Path

    try:
        return "avx512_vnni" in Path("/proc/cpuinfo").read_text().split()
    except OSError:
        return False


@pytest.mark.skipif(not _cpu_has_vnni(), reason="this CPU has no AVX-512 VNNI to run it")
@pytest.mark.parametrize("model", ["digits", "mobilenetv2"])
def test_vnni_dot_kernel_model_is_bit_identical_to_the_default_kernels(model, work, request):
    """Generated for a compiler with VNNI, one-group convs use es_conv2d_i8_dot (u8 x s8
    dot products, pixels in lanes) or, on small planes, es_conv2d_i8_cl (output channels in
    lanes), and global pooling its AVX-512 path; outputs equal the int16 GEMM build's."""
    qdq = request.getfixturevalue("digits_qdq" if model == "digits" else "mnv2_qdq")
    base = generate(qdq, work / f"{model}_base", precision="int8")
    dot = generate(qdq, work / f"{model}_dot", precision="int8", cflags=VNNI_FLAGS)
    body = (dot / "model.c").read_text().split("void es_run_step(")[1]
    assert "es_conv2d_i8_dot" in body and "es_conv2d_i8_gemm" not in body
    assert "es_conv2d_i8_cl" in body
    assert "es_conv2d_i8_dot" not in (base / "model.c").read_text()
    x = (request.getfixturevalue("digits_splits").val_x[:64] if model == "digits"
         else request.getfixturevalue("mnv2").sample_data(8, seed=5)[0])
    assert np.array_equal(run.run(dot, x), run.run(base, x))


def test_kernels_are_chosen_by_what_the_deploying_compiler_predefines():
    from edgesmith.targets import isa

    assert "__x86_64__" in isa.macros("cc", "-O2") or "__aarch64__" in isa.macros("cc")
    assert isa.has_vnni("cc", VNNI_FLAGS)
    assert not isa.has_vnni("cc", "-O2 -mno-avx512f")
    assert not isa.has_vnni("aarch64-linux-gnu-gcc", "-O3")
    assert isa.macros("no-such-compiler-here") == frozenset()  # falls back to portable picks
