"""TFLite target: conversion through onnx2tf, parity in ai-edge-litert, failure paths."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from edgesmith.convert.tflite import TFLiteTarget
from edgesmith.errors import ConversionError
from tests.convert._formats import custom_op_onnx, digits_bundle, make_ctx, onnx_run, top1

pytestmark = pytest.mark.slow  # onnx2tf: ~5 s per run


VARIANTS = [("int8", "float"), ("int8", "int8"), ("fp32", "float")]


def _profile_listing(variants):
    """The bundled host profile with these tflite targets (what a build hands converters)."""
    from edgesmith.profiles import load, resolve_path
    from edgesmith.profiles.schema import TargetSpec

    targets = [TargetSpec(format="tflite", precision=p, options={"io": io} if p == "int8" else {})
               for p, io in variants]
    return load(resolve_path("host")).model_copy(update={"targets": targets})


@pytest.fixture(scope="module")
def built(digits_ckpt, tmp_path_factory):
    """fp32, int8 (float I/O) and int8 (int8 I/O) of one profile, from one onnx2tf run."""
    folder = tmp_path_factory.mktemp("tflite")
    b = digits_bundle(digits_ckpt, folder)
    t = TFLiteTarget()
    profile = _profile_listing(VARIANTS)
    arts = {}
    for precision, io in VARIANTS:
        ctx = make_ctx(TFLiteTarget, "tflite", precision, b.onnx, b.calib_x, folder, io=io)
        arts[(precision, io)] = t.convert(dataclasses.replace(ctx, profile=profile))
    return b, arts, folder


def test_fp32_matches_onnxruntime_on_nchw_batches_of_any_size(built):
    b, arts, _ = built
    run = TFLiteTarget().runner(arts[("fp32", "float")])
    x = b.val_x[:37]  # the .tflite has a static batch of 1; the runner loops
    y = run(x)
    assert y.shape == (37, 10) and y.dtype == np.float32
    np.testing.assert_allclose(y, onnx_run(b.onnx, x), atol=1e-4)


def test_int8_float_io_keeps_accuracy_at_under_a_third_of_the_size(built):
    b, arts, _ = built
    fp32, int8 = arts[("fp32", "float")], arts[("int8", "float")]
    ref = top1(onnx_run(b.onnx, b.val_x), b.val_y)
    acc = top1(TFLiteTarget().runner(int8)(b.val_x), b.val_y)
    assert ref - acc <= 0.01, (ref, acc)
    assert int8.size_bytes <= 0.3 * fp32.size_bytes
    assert int8.meta["inputs"][0]["dtype"] == "float32"
    assert "CONV_2D" in int8.meta["ops"] and int8.meta["calibration"]["samples"] == 100


def test_int8_io_variant_takes_int8_tensors_and_runner_dequantizes(built):
    b, arts, _ = built
    art = arts[("int8", "int8")]
    assert art.meta["inputs"][0]["dtype"] == "int8"
    assert art.meta["outputs"][0]["dtype"] == "int8"
    y = TFLiteTarget().runner(art)(b.val_x)
    assert y.dtype == np.float32
    ref = onnx_run(b.onnx, b.val_x)
    assert (y.argmax(1) == ref.argmax(1)).mean() >= 0.98
    spec = TFLiteTarget().device_bench_spec(art)
    assert spec["io"] == "int8" and spec["files"] == ["model.tflite"]
    assert spec["inputs"][0]["quantization"][0] > 0


def test_one_onnx2tf_run_serves_every_tflite_target_and_logs_it(built):
    _, _, folder = built
    logs = {p.name: p.read_text() for p in (folder / "logs").glob("tflite-*.log")}
    assert sum("$ onnx2tf" in text for text in logs.values()) == 1
    assert sum("reusing" in text for text in logs.values()) == 2
    assert any("Full INT8 Quantization tflite output complete" in t for t in logs.values())


def test_onnx2tf_writes_only_the_variants_the_profile_asks_for(built):
    """onnx2tf alone would also write float16, dynamic-range and two int16-activation
    models, three of them calibrated on every sample: minutes on a larger model."""
    _, _, folder = built
    (saved,) = (folder / "work").glob("onnx2tf-*-int8/saved_model")
    written = sorted(p.name.removeprefix("digits_") for p in saved.glob("*.tflite"))
    # calibrated: the float model with calibration statistics the INT8 ones were quantized
    # from, kept for the INT8 fallback (requantized without calibrating again)
    assert written == ["calibrated.tflite", "float32.tflite", "full_integer_quant.tflite",
                       "integer_quant.tflite"]
    log = "".join(p.read_text() for p in (folder / "logs").glob("tflite-*.log"))
    for skipped in ("float16", "dynamic_range_quant", "int16_act"):
        assert f"skipped onnx2tf's {skipped} TFLite conversion" in log


def test_float_target_alone_runs_onnx2tf_without_calibrating(digits_ckpt, tmp_path):
    b = digits_bundle(digits_ckpt, tmp_path)
    ctx = make_ctx(TFLiteTarget, "tflite", "fp32", b.onnx, b.calib_x, tmp_path)
    art = TFLiteTarget().convert(dataclasses.replace(ctx, profile=_profile_listing(
        [("fp32", "float")])))
    assert art.meta["inputs"][0]["dtype"] == "float32"
    (saved,) = (tmp_path / "work").glob("onnx2tf-*/saved_model")
    assert [p.name for p in saved.glob("*.tflite")] == ["digits_float32.tflite"]
    assert "INT8 Quantization" not in ctx.log_path.read_text()


def test_converter_crash_is_a_conversion_error_naming_format_and_stage(tmp_path):
    path = custom_op_onnx(tmp_path / "custom.onnx")
    ctx = make_ctx(TFLiteTarget, "tflite", "fp32", path,
                   np.zeros((4, 1, 4, 4), np.float32), tmp_path)
    with pytest.raises(ConversionError) as e:
        TFLiteTarget().convert(ctx)
    assert "tflite conversion (onnx2tf)" in str(e.value)
    assert str(ctx.log_path) in str(e.value)
    assert "onnx2tf" in ctx.log_path.read_text()
    assert not (ctx.out_dir / "model.tflite").exists()
