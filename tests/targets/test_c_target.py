"""The registered ``c`` target: options, compat, convert -> artifact, runner, bench spec."""

from __future__ import annotations

import numpy as np
import pytest

from edgesmith.pipeline.registry import ConvertContext, get
from edgesmith.profiles.schema import TargetSpec
from tests.targets._helpers import ort_run


def _ctx(tmp_path, onnx_path, calib_x, precision="fp32", **options):
    from edgesmith.compress.calibration import CalibrationSet

    t = get("c")
    (tmp_path / "work").mkdir(exist_ok=True)
    return t, ConvertContext(
        fp32_onnx=onnx_path, spec=None, calib=CalibrationSet(np.ascontiguousarray(calib_x)),
        target=TargetSpec(format="c", precision=precision, options=options),
        options=t.Options.model_validate(options), profile=None, out_dir=tmp_path / "out",
        work_dir=tmp_path / "work", log_path=tmp_path / "log.txt")


def test_options_reject_unknown_keys():
    from pydantic import ValidationError

    t = get("c")
    assert t.Options.model_validate({}).weights == "mmap"
    with pytest.raises(ValidationError):
        t.Options.model_validate({"wieghts": "embedded"})


def test_compat_marks_unknown_ops_unsupported_and_names_known_ones():
    t = get("c")
    assert t.compat("Conv", {}, "int8").status == "supported"
    assert t.compat("BatchNormalization", {}, "fp32").status == "lowered"
    assert t.compat("NonMaxSuppression", {}, "fp32").status == "unsupported"
    assert t.compat("Resize", {"mode": "cubic"}, "fp32").status == "unsupported"


def test_convert_fp32_builds_and_runs(tmp_path, digits_onnx, digits_splits):
    t, ctx = _ctx(tmp_path, digits_onnx, digits_splits.calib_x)
    a = t.convert(ctx)
    assert a.format == "c" and a.precision == "fp32"
    for k in ("arena_bytes", "lower_bound_bytes", "naive_bytes", "efficiency", "weights_bytes"):
        assert k in a.meta
    assert (a.path / "weights.bin").exists() and not (a.path / "edgesmith_bench").exists()
    x = digits_splits.val_x[:8]
    y = t.runner(a)(x)
    assert np.abs(y - ort_run(digits_onnx, x)).max() < 1e-4 * np.abs(y).max()
    spec = t.device_bench_spec(a)
    assert "model.c" in spec["files"] and spec["build"][0] == "make"


def test_host_latency_times_the_inference_not_the_process_and_builds_once(tmp_path,
                                                                          digits_onnx,
                                                                          digits_splits):
    from edgesmith.targets import c_target

    t, ctx = _ctx(tmp_path, digits_onnx, digits_splits.calib_x)
    a = t.convert(ctx)
    t.runner(a)
    build = c_target._BUILDS[(str(a.path.resolve()), a.sha256)]
    ms = t.host_latency_ms(a, digits_splits.val_x[:4])
    assert ms is not None and 0 < ms < 5  # a process start alone is ~10 ms
    assert c_target._BUILDS[(str(a.path.resolve()), a.sha256)] is build  # reused
    folder = build.dir
    assert folder.exists()
    del c_target._BUILDS[(str(a.path.resolve()), a.sha256)]
    del build
    import gc

    gc.collect()
    assert not folder.exists()


@pytest.mark.slow
def test_convert_int8_calibrates_when_no_qdq_model_is_given(tmp_path, digits_onnx,
                                                            digits_splits):
    t, ctx = _ctx(tmp_path, digits_onnx, digits_splits.calib_x[:64], "int8",
                  weights="embedded")
    a = t.convert(ctx)
    assert a.precision == "int8" and (a.path / "weights_data.c").exists()
    y = t.runner(a)(digits_splits.val_x[:16])
    assert y.shape == (16, 10)
