"""The registered ``c`` target: options, compat, convert -> artifact, runner, bench spec."""

from __future__ import annotations

import numpy as np
import pytest

from edgesmith.errors import ConversionError
from edgesmith.pipeline.registry import get
from edgesmith.profiles.schema import TargetSpec
from edgesmith.target import ConvertContext
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
    assert t.Options.model_validate({}).requant == "fp32"
    with pytest.raises(ValidationError):
        t.Options.model_validate({"wieghts": "embedded"})
    with pytest.raises(ValidationError, match="'fp32' or 'fixed'"):
        t.Options.model_validate({"requant": "float"})


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
def test_convert_int8_lowers_the_pipelines_static_qdq_model(tmp_path, digits_onnx,
                                                             digits_splits):
    from dataclasses import replace

    from edgesmith.convert.onnx_qdq import quantize_qdq

    t, ctx = _ctx(tmp_path, digits_onnx, digits_splits.calib_x[:64], "int8",
                  weights="embedded", requant="fixed")
    with pytest.raises(ConversionError, match="no static QDQ model"):
        t.convert(ctx)  # the pipeline calibrates once; the target never does it on its own
    ctx = replace(ctx, static_qdq=quantize_qdq(digits_onnx, ctx.calib, tmp_path / "q.onnx"))
    a = t.convert(ctx)
    assert a.meta["int8_source"] == "static" and a.meta["source_onnx"] == ctx.static_qdq.name
    assert a.precision == "int8" and (a.path / "weights_data.c").exists()
    assert a.meta["requant"] == "fixed" and "ES_RQ_FP32" not in (a.path / "model.c").read_text()
    y = t.runner(a)(digits_splits.val_x[:16])
    assert y.shape == (16, 10)


def _per_axis_activation_qdq(src, out):
    """Turn the first activation Q/DQ pair of a QDQ model into per-channel quantization
    (as NNCF's QAT export does for some activations): the C runtime cannot lower it."""
    import onnx
    from onnx import numpy_helper

    m = onnx.load(str(src))
    inits = {i.name: i for i in m.graph.initializer}
    producers = {o: n for n in m.graph.node for o in n.output}
    q = next(n for n in m.graph.node if n.op_type == "QuantizeLinear"
             and n.input[0] not in inits and n.input[0] in producers
             and producers[n.input[0]].op_type in ("Relu", "Conv"))
    dq = next(n for n in m.graph.node
              if n.op_type == "DequantizeLinear" and n.input[0] == q.output[0])
    scale = numpy_helper.to_array(inits[q.input[1]])
    zp = numpy_helper.to_array(inits[q.input[2]])
    c = 16
    m.graph.initializer.extend([numpy_helper.from_array(np.full(c, scale, np.float32), "pa_s"),
                                numpy_helper.from_array(np.full(c, zp, zp.dtype), "pa_z")])
    for n in (q, dq):
        n.input[1], n.input[2] = "pa_s", "pa_z"
        n.attribute.append(onnx.helper.make_attribute("axis", 1))
    onnx.save(m, str(out))
    return out


@pytest.mark.slow
def test_unlowerable_qat_model_falls_back_to_static_calibration(tmp_path, work, digits_qdq,
                                                                digits_onnx, digits_splits):
    qat = _per_axis_activation_qdq(digits_qdq, tmp_path / "qat.onnx")
    t, ctx = _ctx(tmp_path, digits_onnx, digits_splits.calib_x[:64], "int8")
    ctx.qdq_onnx, ctx.static_qdq = qat, digits_qdq
    a = t.convert(ctx)
    assert a.meta["int8_source"].startswith("static") and "per-axis" in a.meta["int8_source"]
    assert "falling back to static QDQ" in ctx.log_path.read_text()
    assert t.runner(a)(digits_splits.val_x[:4]).shape == (4, 10)


def test_lowerable_qat_model_is_used_as_is(tmp_path, digits_qdq, digits_onnx, digits_splits):
    t, ctx = _ctx(tmp_path, digits_onnx, digits_splits.calib_x[:64], "int8")
    ctx.qdq_onnx = digits_qdq
    a = t.convert(ctx)
    assert a.meta["int8_source"] == "qat" and a.meta["source_onnx"] == digits_qdq.name
