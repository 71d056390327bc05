"""OpenVINO IR target: convert_model, fp16 weights, nncf / QAT int8, CPU runner."""

from __future__ import annotations

import numpy as np
import pytest

from edgesmith.convert.openvino import OpenVINOTarget
from edgesmith.errors import ConversionError
from tests.convert._formats import custom_op_onnx, digits_bundle, make_ctx, onnx_run, top1


@pytest.fixture(scope="module")
def bundle(digits_ckpt, tmp_path_factory):
    folder = tmp_path_factory.mktemp("openvino")
    return digits_bundle(digits_ckpt, folder), folder


def _convert(bundle, precision, **kw):
    b, folder = bundle
    ctx = make_ctx(OpenVINOTarget, "openvino", precision, b.onnx, b.calib_x, folder, **kw)
    return OpenVINOTarget().convert(ctx), ctx


def test_fp32_ir_matches_onnxruntime_with_dynamic_batch(bundle):
    b, _ = bundle
    art, _ = _convert(bundle, "fp32")
    assert art.path.suffix == ".xml" and art.path.with_suffix(".bin").is_file()
    run = OpenVINOTarget().runner(art)
    for n in (1, 64):
        np.testing.assert_allclose(run(b.val_x[:n]), onnx_run(b.onnx, b.val_x[:n]), atol=1e-4)
    spec = OpenVINOTarget().device_bench_spec(art)
    assert spec["files"] == ["model.xml", "model.bin"] and spec["runtime"] == "openvino"


def test_fp16_halves_the_weights_and_keeps_parity(bundle):
    b, _ = bundle
    fp32, _ = _convert(bundle, "fp32")
    fp16, _ = _convert(bundle, "fp16")
    assert fp16.meta["weights_bytes"] <= 0.51 * fp32.meta["weights_bytes"]
    y = OpenVINOTarget().runner(fp16)(b.val_x)
    np.testing.assert_allclose(y, onnx_run(b.onnx, b.val_x), atol=5e-2)


def test_nncf_int8_keeps_accuracy_and_quarters_the_weights(bundle):
    b, _ = bundle
    fp32, _ = _convert(bundle, "fp32")
    int8, ctx = _convert(bundle, "int8")
    assert int8.meta["ops"].get("FakeQuantize", 0) > 0
    assert int8.meta["weights_bytes"] <= 0.3 * fp32.meta["weights_bytes"]
    ref = top1(onnx_run(b.onnx, b.val_x), b.val_y)
    assert ref - top1(OpenVINOTarget().runner(int8)(b.val_x), b.val_y) <= 0.01
    assert int8.meta["calibration"]["samples"] == 100
    assert "nncf" in ctx.log_path.read_text()


def test_int8_from_the_qat_qdq_model_uses_its_scales(bundle, tmp_path):
    from edgesmith.compress.calibration import CalibrationSet
    from edgesmith.convert.onnx_qdq import quantize_qdq

    b, _ = bundle
    qdq = quantize_qdq(b.onnx, CalibrationSet(x=b.calib_x), tmp_path / "qdq.onnx")
    art, _ = _convert(bundle, "int8", qdq_onnx=qdq)
    assert art.meta["source"].startswith("QAT export")
    assert art.meta["ops"].get("FakeQuantize", 0) > 0
    y = OpenVINOTarget().runner(art)(b.val_x)
    q = onnx_run(qdq, b.val_x)
    assert (y.argmax(1) == q.argmax(1)).mean() >= 0.98


def test_converter_crash_is_a_conversion_error_naming_format_and_stage(tmp_path):
    path = custom_op_onnx(tmp_path / "custom.onnx")
    ctx = make_ctx(OpenVINOTarget, "openvino", "fp32", path,
                   np.zeros((4, 1, 4, 4), np.float32), tmp_path)
    with pytest.raises(ConversionError) as e:
        OpenVINOTarget().convert(ctx)
    assert "openvino conversion (openvino.convert_model)" in str(e.value)
    assert "Frobnicate" in ctx.log_path.read_text()
