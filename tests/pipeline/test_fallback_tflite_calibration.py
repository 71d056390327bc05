"""TFLite's calibration rung (issue 15): TensorFlow calibrates min/max only, so the
fallback's percentile try narrows the ranges stored in onnx2tf's calibrated model before
TensorFlow's MLIR quantizer derives the scales; real onnx2tf, TensorFlow and LiteRT.

The model and data are test_fallback_calibration's: channel 0 is zero everywhere but one
pixel of one calibration sample, so min/max stretches the input's per-tensor scale over
that outlier and the image rounds away; its 99.99th percentile is the image's own range."""

from __future__ import annotations

from tests.pipeline.test_fallback_calibration import (  # noqa: F401 - pytest fixture
    outlier_fixed_by_own_ranges,
    two_channel_model,
)


def test_tflite_int8_outlier_range_is_fixed_by_percentile_with_no_layer_in_float(
        cli, two_channel_model, tmp_path):  # noqa: F811 - the imported fixture
    out, t = outlier_fixed_by_own_ranges(cli, two_channel_model, tmp_path, "tflite:int8")
    assert t["meta"]["calibration"]["method"] == "percentile"
    # the shipped model quantizes its input with the image's range, not the outlier's
    from ai_edge_litert.interpreter import Interpreter

    interp = Interpreter(str(out / "targets" / "tflite-int8" / "model.tflite"))
    scales = [d["quantization"][0] for d in interp.get_tensor_details()
              if d["dtype"].__name__ == "int8" and d["quantization"][0] > 0
              and len(d["shape"]) == 4 and d["shape"][-1] == 2]
    assert scales and max(scales) < 0.05  # min/max would give (1000 + 1) / 255 = 3.9
