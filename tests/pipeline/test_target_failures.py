"""What happens to one target when its converter crashes, its output is off, or the data
is short: real converters and runtimes, called through the stage the build uses.

These graphs hold ops the compat report would stop before conversion (that is its job),
so the tests call ``stages.convert_and_validate`` directly: it is the safety net for ops
the compat rules do not know yet.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from edgesmith import profiles
from edgesmith.artifact import sha256_path
from edgesmith.compress.calibration import CalibrationSet
from edgesmith.convert.optimize import optimize, run_ort
from edgesmith.errors import ConversionError
from edgesmith.pipeline import data, registry, stages, validate
from edgesmith.profiles.schema import TargetSpec
from tests.conftest import DIGITS_ARCH


def _graph(path, nodes, inits):
    """digits-shaped input (N, 1, 8, 8) -> ... -> output (N, 10)."""
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("input", TensorProto.FLOAT,
                                                   ["batch", 1, 8, 8])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["batch", 10])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), str(path))
    return path


def _weights(n_in):
    w = (np.random.default_rng(0).normal(size=(n_in, 10)) / np.sqrt(n_in)).astype(np.float32)
    return numpy_helper.from_array(w, "W")


def dft_model(path):
    axes = numpy_helper.from_array(np.array([-1], np.int64), "axes")
    return _graph(path, [
        helper.make_node("Unsqueeze", ["input", "axes"], ["u"], name="unsq"),
        helper.make_node("DFT", ["u"], ["f"], name="spectrum", axis=3),
        helper.make_node("Flatten", ["f"], ["flat"], name="flat"),
        helper.make_node("MatMul", ["flat", "W"], ["output"], name="fc")], [axes, _weights(128)])


def hardmax_model(path):
    return _graph(path, [
        helper.make_node("Hardmax", ["input"], ["h"], name="hardmax", axis=-1),
        helper.make_node("Flatten", ["h"], ["flat"], name="flat"),
        helper.make_node("MatMul", ["flat", "W"], ["output"], name="fc")], [_weights(64)])


def scaled_model(path):
    """relu(x * 1e5) * 1e-5: float16 conversion clamps the 1e5 constant to 65504, so every
    output shrinks by a third while every argmax (and the cosine) stays the same."""
    consts = [numpy_helper.from_array(np.array(v, np.float32), n)
              for n, v in (("big", 1e5), ("small", 1e-5))]
    return _graph(path, [
        helper.make_node("Mul", ["input", "big"], ["a"], name="scale_up"),
        helper.make_node("Relu", ["a"], ["a2"], name="relu"),
        helper.make_node("Mul", ["a2", "small"], ["b"], name="scale_down"),
        helper.make_node("Flatten", ["b"], ["flat"], name="flat"),
        helper.make_node("MatMul", ["flat", "W"], ["output"], name="fc")],
        [*consts, _weights(64)])


@pytest.fixture(scope="module")
def splits():
    return data.digits(0)


def _convert(onnx_path, names, splits, root, work):
    """What build.run does after the compat gate: optimise, then each target in turn."""
    onnx_path = optimize(onnx_path, root / "model.onnx", splits.val_x).path
    out = run_ort(onnx_path, splits.val_x)
    ref = stages.Reference(out, validate.accuracy(out, splits.val_y), "onnxruntime")
    calib = CalibrationSet(x=splits.calib_x)
    targets = []
    for name in names:
        fmt, _, prec = name.partition(":")
        spec = TargetSpec(format=fmt, precision=prec)
        targets.append((spec, registry.validate_options(registry.get(fmt), spec, "test")))
    ctx_args = dict(fp32_onnx=onnx_path, spec=splits.spec, calib=calib,
                    profile=profiles.load("host"), work_dir=work,
                    static_qdq=stages.static_qdq(targets, onnx_path, calib, root, use_cache=False))
    return [stages.convert_and_validate(spec, options, ctx_args, splits, ref, root,
                                        use_cache=False) for spec, options in targets]


@pytest.mark.slow
def test_crashing_converter_is_logged_and_the_other_targets_complete(tmp_path, splits):
    path = dft_model(tmp_path / "dft.onnx")
    tfl, ort = _convert(path, ["tflite:fp32", "onnx:fp32"], splits, tmp_path / "b",
                        tmp_path / "w")
    assert tfl.status == "failed" and tfl.message.startswith("tflite-fp32: convert:")
    assert "logs/tflite-fp32.log" in tfl.message or "tflite-fp32.log" in tfl.message
    log = (tmp_path / "b" / "logs" / "tflite-fp32.log").read_text()
    assert "DFT" in log
    assert ort.status == "ok" and ort.validation.max_abs_err < 1e-5
    err = stages.failure([tfl, ort])
    assert isinstance(err, ConversionError)
    assert err.exit_code == 4 and "tflite-fp32" in err.message()
    assert stages.failure([ort]) is None


@pytest.mark.slow
def test_artifact_with_wrong_outputs_is_rejected_and_kept_for_inspection(tmp_path, splits):
    (r,) = _convert(hardmax_model(tmp_path / "h.onnx"), ["tflite:fp32"], splits,
                    tmp_path / "b", tmp_path / "w")
    assert r.status == "rejected" and "parity off" in r.message
    assert r.validation.cosine < validate.PARITY_MIN_COSINE["fp32"]
    assert (tmp_path / "b" / "rejected" / "tflite-fp32" / "model.tflite").exists()
    assert not (tmp_path / "b" / "targets" / "tflite-fp32").exists()
    assert r.to_json(tmp_path / "b")["path"].startswith("rejected/")


def test_non_finite_outputs_fail_parity_and_keep_the_manifest_strict_json(splits):
    """On this CPU onnxruntime computes fp16 graphs in float32 (it inserts casts), so no real
    converter here overflows; the runner contract is a plain function, so one stands in."""
    x, y = splits.val_x[:8], splits.val_y[:8]
    ref = np.ones((8, 10), np.float32)
    v = validate.validate(lambda b: np.full((len(b), 10), np.inf, np.float32), x, y, ref, 1.0,
                          measure_latency=False)
    assert not v.parity_ok("fp16") and "inf/NaN" in v.parity_problem("fp16")
    json.dumps(v.to_json(), allow_nan=False)


def test_uniform_scale_error_is_rejected_though_cosine_and_top1_agree(tmp_path, splits):
    (r,) = _convert(scaled_model(tmp_path / "s.onnx"), ["onnx:fp16"], splits,
                    tmp_path / "b", tmp_path / "w")
    v = r.validation
    assert v.cosine > 0.999 and v.top1_agreement == 1.0, (v, r.message)
    assert r.status == "rejected" and "of the output range" in r.message


def test_calibration_set_smaller_than_requested_warns_and_uses_what_exists(cli, digits_ckpt,
                                                                           tmp_path):
    prof = tmp_path / "p.yaml"
    prof.write_text("extends: host\ncompress:\n  calibration:\n    samples: 5000\n")
    r = cli("build", digits_ckpt, "--arch", DIGITS_ARCH, "--profile", prof,
            "--out", tmp_path / "o", "-t", "onnx:int8")
    assert r.code == 0, r.err
    assert "calibration asked for 5000 samples" in r.err
    m = json.loads((tmp_path / "o" / "manifest.json").read_text())
    cal = m["stages"]["calibration"]
    assert cal["requested"] == 5000 and cal["samples"] == m["data"]["train"] + m["data"]["calib"]
    assert m["targets"][0]["status"] == "ok"


def _c_int8_sources(tmp_path, splits, order):
    onnx_path = tmp_path / "d.onnx"
    _graph(onnx_path, [helper.make_node("Flatten", ["input"], ["flat"], name="flat"),
                       helper.make_node("MatMul", ["flat", "W"], ["output"], name="fc")],
           [_weights(64)])
    root = tmp_path / "_".join(order)
    results = {r.spec.name: r for r in _convert(onnx_path, order, splits, root, tmp_path / "w")}
    return root, results


@pytest.mark.slow
def test_c_int8_is_built_from_the_pipelines_qdq_model_whatever_the_target_order(tmp_path,
                                                                               splits):
    """The static QDQ model is made once per build and handed to every INT8 target: c-int8
    no longer reads what onnx-int8 left behind (a rejected onnx-int8 moved to rejected/
    used to be lowered from its old path), so the profile's order changes nothing."""
    first, a = _c_int8_sources(tmp_path, splits, ["onnx:int8", "c:int8"])
    second, b = _c_int8_sources(tmp_path, splits, ["c:int8", "onnx:int8"])
    for root, r in ((first, a), (second, b)):
        assert r["c-int8"].status == "ok", r["c-int8"].message
        assert r["c-int8"].artifact.meta["int8_source"] == "static"
        assert r["c-int8"].artifact.meta["source_onnx"] == "model_qdq.onnx"
        assert r["onnx-int8"].artifact.sha256 == sha256_path(root / "model_qdq.onnx")
    assert a["c-int8"].artifact.sha256 == b["c-int8"].artifact.sha256


def test_no_qdq_model_is_made_when_no_int8_target_uses_it(tmp_path, splits):
    calib = CalibrationSet(x=splits.calib_x)
    spec = TargetSpec(format="tflite", precision="int8")
    targets = [(spec, registry.validate_options(registry.get("tflite"), spec, "test"))]
    assert stages.static_qdq(targets, tmp_path / "unused.onnx", calib, tmp_path) is None
    assert not (tmp_path / "model_qdq.onnx").exists()


def test_a_target_option_naming_no_node_is_exit_2_with_its_fix(cli, digits_ckpt, tmp_path):
    """A C target's tiling split that names no node is the user's mistake, found only while
    lowering: the build exits 2 (usage), not 4 (conversion fault), says what to set, and
    the other target of the profile still builds."""
    prof = tmp_path / "p.yaml"
    prof.write_text("extends: host\ntargets:\n  - {format: onnx, precision: fp32}\n"
                    "  - {format: c, precision: fp32, options: {tiling: {patches: 2, "
                    "split: /no/such/node}}}\n")
    r = cli("build", digits_ckpt, "--arch", DIGITS_ARCH, "--profile", prof,
            "--out", tmp_path / "o")
    assert r.code == 2, r.out + r.err
    assert "/no/such/node" in r.err and "fix:" in r.err and "Traceback" not in r.err
    m = json.loads((tmp_path / "o" / "manifest.json").read_text())
    assert {t["name"]: t["status"] for t in m["targets"]} == {"onnx-fp32": "ok",
                                                              "c-fp32": "failed"}
