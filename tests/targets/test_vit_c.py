"""A vision transformer in the C runtime (issue 15).

The class token is broadcast over a dynamic batch (``cls.expand(B, -1, -1)``), which
exports as Shape -> Gather -> ... -> Equal -> Where -> Expand: shape arithmetic that is
constant once the C target fixes the batch to 1, so it folds at generation time instead
of getting run-time kernels. What is left needs LayerNormalization and Gather of an
activation (``x[:, 0]``, ``qkv[0]``); each is checked against onnxruntime on odd shapes,
and a small ViT end to end in FP32 and INT8 (bit for bit with onnxruntime running the
same QDQ model op by op, within one output step of its fused kernels).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from edgesmith.errors import UnsupportedOpError
from edgesmith.targets import run
from edgesmith.targets.ir import lower
from tests.targets._helpers import ROOT, _qdq, export, generate, ort_run, output_scale

SHAPE_OPS = {"Shape", "Equal", "Where", "Expand", "ConstantOfShape"}


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("vit_c")


@pytest.fixture(scope="module")
def vit_onnx(folder) -> Path:
    """A 2-block ViT of width 24 on 16x16 inputs (patch 4), random weights, exported with
    a dynamic batch axis as the pipeline exports."""
    import torch

    sys.path.insert(0, str(ROOT / "examples" / "zoo"))
    try:
        import vit
    finally:
        sys.path.pop(0)
    model = vit.build(num_classes=5, image_size=16, patch=4, dim=24, depth=2, heads=3, seed=3)
    return export(model, torch.zeros(1, 3, 16, 16), folder / "vit.onnx")


def _x(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, 3, 16, 16)).astype(np.float32)


def test_class_token_shape_arithmetic_folds_once_the_batch_is_fixed(vit_onnx):
    from edgesmith.convert.compat import _attrs
    from edgesmith.targets.c_target import CTarget

    nodes = onnx.load(str(vit_onnx)).graph.node
    assert {"Shape", "Equal", "Where", "Expand"} <= {n.op_type for n in nodes}
    for n in nodes:  # the compat table lets the C target build it ...
        assert CTarget().compat(n.op_type, _attrs(n), "fp32").status != "unsupported", n.name
    g = lower(vit_onnx)  # ... and none of the shape arithmetic is left as a step
    assert not [s.name for s in g.steps if s.op in SHAPE_OPS]
    assert sum(s.op == "Gather" for s in g.steps) == 1 + 2 * 3  # x[:, 0]; q, k, v per block


def test_vit_fp32_matches_onnxruntime(vit_onnx, folder):
    out = generate(vit_onnx, folder / "vit_c")
    x = _x(3)
    y, ref = run.run(out, x), ort_run(vit_onnx, x)
    assert np.abs(y - ref).max() <= 1e-4 * np.abs(ref).max()


def test_vit_int8_equals_onnxruntime_op_by_op(vit_onnx, folder):
    qdq = _qdq(vit_onnx, _x(16, seed=1), folder / "vit_qdq.onnx")
    out = generate(qdq, folder / "vit_c_int8", precision="int8")
    x = _x(4, seed=2)
    y = run.run(out, x)
    assert np.array_equal(y, ort_run(qdq, x, "ORT_ENABLE_BASIC"))
    assert np.abs(y - ort_run(qdq, x)).max() <= output_scale(qdq) * 1.001


def test_a_dense_layer_over_tokens_writes_its_parameter_block_once(vit_onnx, folder):
    """Built for VNNI, each of the 17 token rows of a dense layer is one call; the calls
    share one parameter block, so model.c does not grow by a block per row (the trained
    ViT's c-int8 model.c was 1.18 MB of 1,040 identical blocks)."""
    import re

    from edgesmith.targets import codegen
    from edgesmith.targets.isa import VNNI
    from edgesmith.targets.planner import plan

    qdq = _qdq(vit_onnx, _x(16, seed=1), folder / "vit_qdq_blocks.onnx")
    g = lower(qdq, "int8", VNNI)  # generated for a VNNI compiler; not compiled here
    out = folder / "vit_c_int8_blocks"
    codegen.generate(g, plan(g), out)
    text = (out / "model.c").read_text()
    blocks = re.findall(r"static const \w+ (P_\w+) = \{", text)
    uses = re.findall(r"&(P_\w+)", text)
    assert blocks and set(uses) <= set(blocks)
    # 2 blocks x (qkv, proj, fc1, fc2) dense layers over 17 rows: 8 x 16 calls share
    assert len(uses) - len(blocks) >= 8 * 16


def _one_node(path: Path, op: str, x_shape, inits: dict[str, np.ndarray], inputs, outputs,
              y_shape, **attrs) -> Path:
    """input -> op -> output, with constant inputs ``inits``."""
    g = helper.make_graph(
        [helper.make_node(op, inputs, outputs, name=f"the_{op.lower()}", **attrs)], "one",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, y_shape)],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9
    onnx.checker.check_model(m, full_check=True)
    onnx.save(m, str(path))
    return path


@pytest.mark.parametrize(("shape", "axis", "eps"), [((1, 5, 7, 13), -1, 1e-6),
                                                    ((1, 5, 7, 13), 2, 1e-3),
                                                    ((1, 3, 1), -1, 1e-5)])
def test_layernorm_matches_onnxruntime_on_odd_shapes(tmp_path, shape, axis, eps):
    rng = np.random.default_rng(7)
    norm = shape[axis:]
    inits = {"scale": rng.standard_normal(norm).astype(np.float32),
             "bias": rng.standard_normal(norm).astype(np.float32)}
    path = _one_node(tmp_path / "ln.onnx", "LayerNormalization", shape, inits,
                     ["input", "scale", "bias"], ["output"], shape, axis=axis, epsilon=eps)
    # a residual stream's rows: an offset far larger than the spread (one-pass variance
    # loses digits there)
    x = (rng.standard_normal(shape) + 40.0).astype(np.float32)
    y, ref = run.run(generate(path, tmp_path / "c"), x), ort_run(path, x)
    assert np.abs(y - ref).max() <= 2e-5 * max(1.0, np.abs(ref).max())


def test_layernorm_whose_mean_output_is_read_is_refused(tmp_path):
    g = helper.make_graph(
        [helper.make_node("LayerNormalization", ["input", "scale"], ["output", "mean"],
                          name="ln_training", axis=-1),
         helper.make_node("Identity", ["mean"], ["mean_out"], name="keep_mean")], "ln",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 4, 6])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 4, 6]),
         helper.make_tensor_value_info("mean_out", TensorProto.FLOAT, [1, 4, 1])],
        [numpy_helper.from_array(np.ones(6, np.float32), "scale")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(UnsupportedOpError) as e:
        lower(m)
    assert e.value.where == "ln_training" and "Mean / InvStdDev outputs are used" in str(e.value)


@pytest.mark.parametrize(("shape", "axis", "idx", "y_shape"), [
    ((1, 5, 7), 1, np.array(0, np.int64), (1, 7)),                  # a ViT's x[:, 0]
    ((3, 1, 3, 5, 4), 0, np.array(2, np.int64), (1, 3, 5, 4)),      # its qkv[2]
    ((1, 5, 7), 2, np.array([6, -1, 0, 3], np.int64), (1, 5, 4)),   # repeated, negative
    ((1, 6, 3), 1, np.array([[5, 0], [2, -6]], np.int64), (1, 2, 2, 3)),
])
def test_gather_of_an_activation_copies_the_indexed_rows(tmp_path, shape, axis, idx, y_shape):
    path = _one_node(tmp_path / "g.onnx", "Gather", shape, {"idx": idx}, ["input", "idx"],
                     ["output"], y_shape, axis=axis)
    x = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
    y = run.run(generate(path, tmp_path / "c"), x)
    assert np.array_equal(y, ort_run(path, x))


def test_gather_index_out_of_range_is_refused_with_the_node(tmp_path):
    path = _one_node(tmp_path / "g.onnx", "Gather", (1, 5, 7), {"idx": np.array(7, np.int64)},
                     ["input", "idx"], ["output"], (1, 5), axis=2)
    with pytest.raises(UnsupportedOpError) as e:
        lower(path)
    assert e.value.where == "the_gather" and "out of range" in str(e.value)
