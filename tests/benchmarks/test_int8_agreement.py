"""benchmarks/int8_agreement.py's core on the digits CNN: the per-layer cut finds every
quantized layer, the C build agrees with onnxruntime within 1 LSB on each, a layer that
does not agree is caught, and end to end C is as close to onnxruntime as onnxruntime's
fused and unfused graphs are to each other."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks import int8_agreement as agree  # noqa: E402
from tests.conftest import require_tools  # noqa: E402


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("int8_agreement")


@pytest.fixture(scope="module")
def digits(work):
    """(QDQ model path, val x, val y) of the digits CNN, trained for 3 epochs."""
    from tests.targets._helpers import _qdq

    onnx_path, calib, val_x, val_y, _ = agree.digits_model(work, epochs=3)
    return _qdq(onnx_path, calib, work / "digits_qdq.onnx"), val_x, val_y


@pytest.fixture(scope="module")
def ints(digits):
    import onnx

    qdq, val_x, _ = digits
    m = onnx.load(str(qdq))
    return m, agree.ort_ints(m, val_x[:4])


def test_layers_are_every_quantize_node_after_the_input(digits):
    import onnx

    m = onnx.load(str(digits[0]))
    qs = [n for n in m.graph.node if n.op_type == "QuantizeLinear"]
    lays = agree.layers(m)
    # every Q node but the one on the graph input ends a layer, and each layer has a
    # computing op and an int8 input from another Q node
    assert [lay.q.output[0] for lay in lays] == [q.output[0] for q in qs[1:]]
    assert all(lay.ops and lay.acts for lay in lays)
    assert {op for lay in lays for op in lay.ops} >= {"Conv", "Gemm"}


@pytest.mark.slow
def test_every_c_layer_within_one_lsb_of_onnxruntime_on_its_own_int8_input(ints, work):
    require_tools("cc", "make")
    m, got = ints
    res = agree.judge_layers(m, got, work, "digits_ok")
    assert res["layers"] == len(agree.layers(m))
    assert res["pass"] and res["max_lsb"] <= 1 and res["min_within_1lsb"] == 1.0, res


@pytest.mark.slow
def test_a_layer_two_lsb_off_fails_the_per_layer_criterion(ints, work):
    """The check can fail: onnxruntime's output of one layer moved by 2 LSB (its input
    untouched) must show as that layer, 2 LSB off, criterion failed."""
    require_tools("cc", "make")
    m, got = ints
    lays = agree.layers(m)
    target = lays[-1]  # the classifier: no later layer reads it
    bent = dict(got)
    v = got[target.q.output[0]].astype(np.int32)
    bent[target.q.output[0]] = np.where(v <= 0, v + 2, v - 2).astype(np.int8)
    res = agree.judge_layers(m, bent, work, "digits_bent")
    bad = [r for r in res["per_layer"] if r["max_lsb"] > 1]
    assert not res["pass"]
    assert [r["layer"] for r in bad] == [target.label]
    assert bad[0]["max_lsb"] == 2


@pytest.mark.slow
def test_c_agrees_with_onnxruntime_at_least_as_well_as_onnxruntime_with_itself(digits, work):
    require_tools("cc", "make")
    qdq, val_x, _ = digits
    res = agree.end_to_end(qdq, val_x[:48], work)
    assert res["samples"] == 48
    c, own = res["c_vs_ort"], res["ort_fused_vs_unfused"]
    assert res["pass"], (c, own)
    assert res["first_divergence"] is None  # looked for only when (b) fails
    assert set(res["vs_float64"]) == {"c", "ort_fused", "ort_unfused"}
    assert res["vs_float64"]["c"]["within_1lsb"] >= 0.99
    assert c["within_1lsb"] >= own["within_1lsb"] and c["top1"] >= own["top1"]
    assert res["c_int8"].shape == res["ort_int8"].shape == (48, 10)


def test_float64_graph_agrees_with_onnxruntime_on_every_quantized_tensor(ints, digits):
    """qdq_float64 runs the graph onnxruntime runs: every Q output of the digits CNN
    within 1 LSB of onnxruntime's unfused values, nearly all exact (they differ only where
    float32 lands a value on the other side of a tie)."""
    from benchmarks import qdq_float64

    m, got = ints
    qs = [n.output[0] for n in m.graph.node if n.op_type == "QuantizeLinear"]
    ref = qdq_float64.run(m, digits[1][:4], qs, batch=3)  # two batches: the seam too
    for t in qs:
        err = np.abs(ref[t].astype(np.int32) - got[t].astype(np.int32))
        assert err.max() <= 1 and (err == 0).mean() >= 0.99, t


@pytest.mark.parametrize("kind", ["quads", "pquads"])
def test_dumped_hand_over_layouts_read_back_as_chw(kind, tmp_path):
    """A buffer a step writes as channel-quad planes (y_quads) or pixel quads (y_pquads) is
    read back in CHW order before it is compared (first_divergence), from the step's own
    es_conv_params in model.c: the byte positions and the +128 are the kernels'
    (dw_hwc_check.c, conv_fast_check.c)."""
    m, p = 32, 24
    chw = np.random.default_rng(1).integers(-128, 128, m * p).astype(np.int8)
    c, j = np.divmod(np.arange(m * p), p)
    at = ((c // 4) * 4 * p + 4 * j + c % 4 if kind == "quads" else
          ((c // 16) * p + j - j % 4) * 16 + (c % 16) * 4 + j % 4)
    raw = np.empty_like(chw)
    raw[at] = (chw.view(np.uint8) ^ 0x80).view(np.int8)
    assert np.array_equal(agree.to_chw(raw, (kind, m, p)), chw)
    (tmp_path / "model.c").write_text(
        "static const es_conv_params P_dw = {\n    .C = 32, .H = 4, .W = 6, .M = 32, "
        ".OH = 4, .OW = 6, .group = 32,\n    .y_%s = 1,\n};\n"
        "static const es_conv_params P_pw = {\n    .C = 32, .M = 8, .OH = 4, .OW = 6,\n};\n"
        "    case 3: /* dw */\n        es_dwconv2d_i8_hwc((int8_t *)T_a, (const int8_t *)T_w,\n"
        "                           (int8_t *)T_b,\n                           &P_dw);\n"
        "    case 4: /* pw */\n        es_conv2d_i8_dot((int8_t *)T_b, (void *)S,\n"
        "                         (int8_t *)T_c,\n                         &P_pw);\n"
        % ("pquads" if kind == "pquads" else "quads"))
    assert agree.c_layouts(tmp_path) == {"T_b": (kind, 32, 24)}
