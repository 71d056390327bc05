"""Declared device runtimes (issue 20): the static op-version checks and the dynamic run
against exactly the declared release, in real isolated environments (real pip, real
tflite-runtime 2.14.0 and onnxruntime 1.16.3). The environments are made once per test
session under a temporary XDG_CACHE_HOME and reused by every test here."""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pytest

from edgesmith.convert import runtime_compat, runtime_env, runtime_run
from edgesmith.convert.tflite import TFLiteTarget

TFLITE = "tflite-runtime==2.14.0"
ORT = "onnxruntime==1.16.3"
OPENVINO = "openvino==2024.6.0"  # the intel-nuc profile's runtime
OPENVINO_MAX_OPSET_2024_6 = 15  # probed: openvino.runtime.opset15 is its newest
FC = 9  # BuiltinOperator.FULLY_CONNECTED
FC_MAX_2_14 = 10  # what tflite-runtime 2.14.0 registers (probed; ai-edge-litert 2.x: 14)


@pytest.fixture(scope="session")
def runtime_cache(tmp_path_factory) -> Path:
    """One folder per test session, whichever test module asks first (the pipeline tests
    import these fixtures), so each release's env is created once per session."""
    kept = os.environ.get("EDGESMITH_TEST_RUNTIMES")  # a folder to reuse between sessions
    path = Path(kept) if kept else tmp_path_factory.getbasetemp() / "xdg-cache-runtimes"
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture
def xdg(runtime_cache, monkeypatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(runtime_cache))
    return runtime_cache


def _env(runtime_cache: Path, requirement: str) -> runtime_env.RuntimeEnv:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_CACHE_HOME", str(runtime_cache))
        return runtime_env.ensure(requirement)


@pytest.fixture(scope="session")
def tflite_env(runtime_cache) -> runtime_env.RuntimeEnv:
    return _env(runtime_cache, TFLITE)


@pytest.fixture(scope="session")
def ort_env(runtime_cache) -> runtime_env.RuntimeEnv:
    return _env(runtime_cache, ORT)


@pytest.fixture(scope="session")
def openvino_env(runtime_cache) -> runtime_env.RuntimeEnv:
    return _env(runtime_cache, OPENVINO)


def small_openvino_ir(folder: Path) -> Path:
    """A conv -> relu -> dense IR (1x1x8x8 -> 10, random weights) saved by the host's
    OpenVINO (2026.x) from an ONNX graph: the kind of file the openvino target writes."""
    import onnx
    import openvino as ov
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((8, 1, 3, 3)).astype(np.float32), "w")
    fc = numpy_helper.from_array(
        (rng.standard_normal((8 * 6 * 6, 10)) * 0.1).astype(np.float32), "fc")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Flatten", ["r"], ["f"]),
             helper.make_node("MatMul", ["f", "fc"], ["y"])]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], [w, fc])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(folder / "m.onnx"))
    xml = folder / "model.xml"
    ov.save_model(ov.convert_model(str(folder / "m.onnx")), str(xml), compress_to_fp16=False)
    return xml


def _layer_at_opset(xml: Path, layer_type: str, version: int) -> str:
    """Rewrite the first ``layer_type`` layer's version attribute in place; its name."""
    import xml.etree.ElementTree as ET

    tree = ET.parse(xml)
    layer = next(lay for lay in tree.getroot().iter("layer") if lay.get("type") == layer_type)
    layer.set("version", f"opset{version}")
    tree.write(xml)
    return str(layer.get("name"))


def fully_connected_tflite(path: Path, version: int = 1) -> Path:
    """A one-op float model (y = x @ W.T + b, 8 -> 4) written through the TFLite schema's
    object API: seconds faster than importing TensorFlow to convert one."""
    from ai_edge_litert import schema_py_generated as s

    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 8)).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    buffers = [s.BufferT(), s.BufferT(), s.BufferT(), s.BufferT(), s.BufferT()]
    buffers[2].data, buffers[3].data = list(w.tobytes()), list(b.tobytes())

    def tensor(name: str, shape: list[int], buffer: int):
        t = s.TensorT()
        t.name, t.shape, t.type, t.buffer = name.encode(), shape, s.TensorType.FLOAT32, buffer
        return t

    op = s.OperatorT()
    op.opcodeIndex, op.inputs, op.outputs = 0, [0, 2, 3], [1]
    op.builtinOptionsType = s.BuiltinOptions.FullyConnectedOptions
    op.builtinOptions = s.FullyConnectedOptionsT()
    sub = s.SubGraphT()
    sub.tensors = [tensor("x", [1, 8], 1), tensor("y", [1, 4], 4), tensor("w", [4, 8], 2),
                   tensor("b", [4], 3)]
    sub.inputs, sub.outputs, sub.operators = [0], [1], [op]
    code = s.OperatorCodeT()
    code.builtinCode, code.deprecatedBuiltinCode, code.version = FC, FC, version
    model = s.ModelT()
    model.version, model.operatorCodes, model.subgraphs, model.buffers = 3, [code], [sub], buffers
    runtime_compat.write_tflite(model, path)
    return path


def onnx_relu(path: Path, opset: int, ir: int = 8) -> Path:
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = ir
    onnx.save(model, str(path))
    return path


def _host_run(path: Path, x: np.ndarray) -> np.ndarray:
    from ai_edge_litert.interpreter import Interpreter

    interp = Interpreter(str(path))
    interp.allocate_tensors()
    out = []
    for sample in x:
        interp.set_tensor(interp.get_input_details()[0]["index"], sample[None])
        interp.invoke()
        out.append(interp.get_tensor(interp.get_output_details()[0]["index"])[0])
    return np.stack(out)


@pytest.mark.slow
def test_tflite_op_version_newer_than_the_declared_release_is_caught_statically(
        tmp_path, tflite_env, xdg):
    model = fully_connected_tflite(tmp_path / "fc.tflite", version=FC_MAX_2_14 + 1)
    check = runtime_compat.check("tflite", model, TFLITE, tflite_env)
    assert check.status == "op missing"
    assert [(f.op, f.version, f.max_version) for f in check.findings] == [
        ("FULLY_CONNECTED", FC_MAX_2_14 + 1, FC_MAX_2_14)]
    assert "FULLY_CONNECTED version 11" in check.findings[0].text()
    assert "max 10" in check.findings[0].text()


@pytest.mark.slow
def test_tflite_op_versions_the_release_registers_pass_and_are_cached(
        tmp_path, tflite_env, xdg):
    model = fully_connected_tflite(tmp_path / "fc.tflite", version=FC_MAX_2_14)
    assert runtime_compat.check("tflite", model, TFLITE, tflite_env).status == "ok"
    probes = runtime_compat._load_probes(tflite_env)
    assert probes[f"tflite:{FC}:{FC_MAX_2_14}"] is True
    t0 = time.perf_counter()  # answered from the cache: no interpreter is started
    assert runtime_compat.check("tflite", model, TFLITE, tflite_env).status == "ok"
    assert time.perf_counter() - t0 < 1.0


@pytest.mark.slow
def test_tflite_op_version_newer_than_the_release_is_caught_when_run_there(
        tmp_path, tflite_env, xdg):
    x = np.random.default_rng(1).standard_normal((4, 8)).astype(np.float32)
    good = fully_connected_tflite(tmp_path / "fc.tflite")
    host = _host_run(good, x)  # the host's ai-edge-litert runs version 11 as well
    newer = fully_connected_tflite(tmp_path / "fc11.tflite", version=FC_MAX_2_14 + 1)
    np.testing.assert_allclose(_host_run(newer, x), host)
    kw = dict(lsb=None, min_cosine=0.99999, max_rel_err=1e-3)
    hosts = {"host": host}
    bad = runtime_run.check(tflite_env, TFLiteTarget.device_loader, newer, x, hosts, **kw)
    assert bad.status == "op missing"
    assert "FULLY_CONNECTED" in bad.detail and "version '11'" in bad.detail
    ok = runtime_run.check(tflite_env, TFLiteTarget.device_loader, good, x, hosts, **kw)
    assert ok.status == "ok" and ok.samples == 4
    assert ok.max_abs_diff is not None and ok.max_abs_diff < 1e-5


@pytest.mark.slow
def test_outputs_that_differ_from_the_host_are_reported_as_disagreeing(
        tmp_path, tflite_env, xdg):
    x = np.random.default_rng(2).standard_normal((3, 8)).astype(np.float32)
    model = fully_connected_tflite(tmp_path / "fc.tflite")
    wrong = _host_run(model, x) + 0.5
    r = runtime_run.check(tflite_env, TFLiteTarget.device_loader, model, x,
                          {"shifted": wrong}, lsb=0.1,
                          min_cosine=0.95, max_rel_err=0.25)
    assert r.status == "disagrees" and r.max_abs_diff == pytest.approx(0.5, abs=1e-5)
    assert "1 LSB" in r.tolerance


@pytest.mark.slow
def test_onnx_opset_newer_than_the_declared_onnxruntime_is_caught(tmp_path, ort_env, xdg):
    assert runtime_compat.onnx_limits(ort_env) == (19, 9)  # onnxruntime 1.16 = ONNX 1.14
    check = runtime_compat.check("onnx", onnx_relu(tmp_path / "m.onnx", 21), ORT, ort_env)
    assert check.status == "op missing"
    assert [(f.op, f.version, f.max_version) for f in check.findings] == [
        ("ai.onnx opset", 21, 19)]
    ir = runtime_compat.check("onnx", onnx_relu(tmp_path / "ir.onnx", 17, ir=10), ORT, ort_env)
    assert [(f.op, f.version, f.max_version) for f in ir.findings] == [("ONNX IR", 10, 9)]


@pytest.mark.slow
def test_onnx_within_the_declared_opset_and_ir_passes(tmp_path, ort_env, xdg):
    assert runtime_compat.check("onnx", onnx_relu(tmp_path / "m.onnx", 19, ir=9), ORT,
                                ort_env).status == "ok"


def test_unavailable_runtime_package_is_a_clear_error_and_leaves_no_env(xdg):
    t0 = time.perf_counter()
    with pytest.raises(runtime_env.RuntimeEnvError) as err:
        runtime_env.ensure("tflite-runtime==0.0.1")
    assert time.perf_counter() - t0 < 120
    msg = err.value.message()
    assert "tflite-runtime==0.0.1" in msg and "No matching distribution" in msg
    assert err.value.exit_code == 2 and "fix:" in msg
    root = runtime_env.cache_root()
    assert not [p for p in root.iterdir() if p.is_dir() and "0.0.1" in p.name]


def test_pip_that_does_not_finish_is_stopped_by_the_timeout(xdg, monkeypatch):
    monkeypatch.setattr(runtime_env, "PIP_TIMEOUT_S", 0.01)
    with pytest.raises(runtime_env.RuntimeEnvError, match="did not finish within"):
        runtime_env.ensure("tflite-runtime==2.13.0")
    assert runtime_env.find("tflite-runtime==2.13.0") is None


def test_half_created_env_is_not_reused(xdg):
    """A creation killed after the rename but before its marker, or a folder left by an
    older edgesmith, has no marker: it is not an environment."""
    req = "onnxruntime==1.15.0"
    half = runtime_env.cache_root() / runtime_env.env_key(req)
    (half / "bin").mkdir(parents=True)
    (half / "bin" / "python").write_text("")
    assert runtime_env.find(req) is None


def test_requirement_with_pip_options_is_refused(xdg):
    with pytest.raises(runtime_env.RuntimeEnvError, match="not a pip requirement"):
        runtime_env.ensure("tflite-runtime==2.14.0 --index-url http://evil")


def test_env_key_changes_with_the_requirement_and_names_it():
    a, b = runtime_env.env_key(TFLITE), runtime_env.env_key("tflite-runtime==2.13.0")
    assert a != b and a.startswith("tflite-runtime-2.14.0-py3.")


def test_coreml_deployment_targets_map_to_the_spec_versions_they_load():
    assert runtime_compat.coreml_spec_limit("iOS16") == 7
    assert runtime_compat.coreml_spec_limit("iOS17") == 8
    assert runtime_compat.coreml_spec_limit("iOS99") is None


@pytest.mark.slow
def test_outputs_matching_one_host_kernel_set_agree_and_name_it(tmp_path, tflite_env, xdg):
    """INT8 outputs depend on the kernels' requantization (XNNPACK vs builtin); a release
    that matches either host run to 1 LSB agrees, and the entry says which one."""
    x = np.random.default_rng(3).standard_normal((3, 8)).astype(np.float32)
    model = fully_connected_tflite(tmp_path / "fc.tflite")
    right = _host_run(model, x)
    r = runtime_run.check(tflite_env, TFLiteTarget.device_loader, model, x,
                          {"xnnpack": right + 0.5, "builtin": right}, lsb=0.1,
                          min_cosine=0.95, max_rel_err=0.25)
    assert r.status == "ok" and r.tolerance.endswith("against the host's builtin")
    assert "xnnpack: max abs diff 0.5" in r.detail


def _openvino_host(xml: Path, x: np.ndarray) -> np.ndarray:
    from edgesmith.artifact import Artifact
    from edgesmith.convert.openvino import OpenVINOTarget

    run = OpenVINOTarget().runner(Artifact.of(xml, "openvino", "fp32"))
    return np.concatenate([run(s[None]) for s in x])


@pytest.mark.slow
def test_openvino_ir_built_here_passes_both_checks_on_openvino_2024_6(
        tmp_path, openvino_env, xdg):
    """Statically (every layer's opset within the release's) and when run there through
    the device loader: at fp32's parity bounds, which bfloat16 inference (the release's
    default on this AVX-512 BF16 CPU) misses, so the loader must ask for f32."""
    xml = small_openvino_ir(tmp_path)
    check = runtime_compat.check("openvino", xml, OPENVINO, openvino_env)
    assert (check.status, check.findings) == ("ok", [])
    assert runtime_compat._load_probes(openvino_env)["openvino:max_opset"] == \
        OPENVINO_MAX_OPSET_2024_6
    x = np.random.default_rng(4).standard_normal((6, 1, 8, 8)).astype(np.float32)
    from edgesmith.convert.openvino import OpenVINOTarget

    r = runtime_run.check(openvino_env, OpenVINOTarget.device_loader, xml, x,
                          {"host": _openvino_host(xml, x)}, lsb=None,
                          min_cosine=0.99999, max_rel_err=1e-3)
    assert r.status == "ok", r
    assert r.samples == 6 and r.max_abs_diff is not None and r.max_abs_diff < 1e-4


@pytest.mark.slow
def test_openvino_layer_at_an_opset_newer_than_the_release_is_caught_naming_the_layer(
        tmp_path, openvino_env, xdg):
    xml = small_openvino_ir(tmp_path)
    name = _layer_at_opset(xml, "ReLU", OPENVINO_MAX_OPSET_2024_6 + 1)
    check = runtime_compat.check("openvino", xml, OPENVINO, openvino_env)
    assert check.status == "op missing"
    assert [(f.op, f.version, f.max_version, f.where) for f in check.findings] == [
        ("ReLU (opset16)", 16, 15, f"layer {name}")]
    assert f"ReLU (opset16) version 16 (layer {name}): max 15" == check.findings[0].text()
    from edgesmith.convert.openvino import OpenVINOTarget

    x = np.zeros((1, 1, 8, 8), np.float32)
    ran = runtime_run.check(openvino_env, OpenVINOTarget.device_loader, xml, x,
                            {"host": np.zeros((1, 10))}, lsb=None, min_cosine=0.99999,
                            max_rel_err=1e-3)
    assert ran.status == "op missing" and "opset16" in ran.detail
