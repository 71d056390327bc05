"""Profile fields that must change what a build does: ``device.ram_mb`` limits what an
artifact may need, and the ONNX target's ``graph_optimization`` is the level its runs use."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper


def _wide_mlp(path):
    """digits-shaped input -> 64x5000 -> 5000x10: 1.4 MB of FP32 weights."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((rng.normal(size=(64, 5000)) / 8).astype(np.float32), "W1"),
             numpy_helper.from_array((rng.normal(size=(5000, 10)) / 70).astype(np.float32),
                                     "W2")]
    graph = helper.make_graph(
        [helper.make_node("Flatten", ["input"], ["f"]),
         helper.make_node("MatMul", ["f", "W1"], ["h"]),
         helper.make_node("MatMul", ["h", "W2"], ["output"])], "g",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 1, 8, 8])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["batch", 10])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


@pytest.mark.slow
def test_an_artifact_larger_than_the_devices_ram_misses_the_budget(cli, tmp_path):
    model = _wide_mlp(tmp_path / "wide.onnx")
    small = tmp_path / "small.yaml"
    small.write_text("extends: host\ndevice:\n  ram_mb: 1\n")
    r = cli("convert", model, "--profile", small, "-t", "onnx:fp32", "--out", tmp_path / "a")
    assert r.code == 3, r.err
    assert "needs 1.4 MB (weights + arena) > device RAM 1 MB" in r.err
    assert "device.ram_mb" in r.err
    target = json.loads((tmp_path / "a" / "manifest.json").read_text())["targets"][0]
    assert target["status"] == "budget"

    big = tmp_path / "big.yaml"
    big.write_text("extends: host\ndevice:\n  ram_mb: 2\n")
    r = cli("convert", model, "--profile", big, "-t", "onnx:fp32", "--out", tmp_path / "b")
    assert r.code == 0, r.err


@pytest.mark.parametrize("level,expected", [("all", "ORT_ENABLE_ALL"),
                                            ("basic", "ORT_ENABLE_BASIC"),
                                            ("none", "ORT_DISABLE_ALL")])
def test_onnx_graph_optimization_option_sets_the_session_level(tmp_path, level, expected):
    import onnxruntime as ort

    from edgesmith.convert.onnx_qdq import _session

    sess = _session(_wide_mlp(tmp_path / "m.onnx"), 1, level)
    assert sess.get_session_options().graph_optimization_level == getattr(
        ort.GraphOptimizationLevel, expected)


@pytest.mark.slow
def test_onnx_target_records_its_graph_optimization_for_every_run(cli, tmp_path):
    model = _wide_mlp(tmp_path / "wide.onnx")
    prof = tmp_path / "p.yaml"
    prof.write_text("extends: host\ntargets:\n  - {format: onnx, precision: fp32, "
                    "options: {graph_optimization: basic}}\n")
    r = cli("convert", model, "--profile", prof, "--out", tmp_path / "o")
    assert r.code == 0, r.err
    target = json.loads((tmp_path / "o" / "manifest.json").read_text())["targets"][0]
    assert target["meta"]["graph_optimization"] == "basic"
