"""Deep graphs lower without hitting Python's recursion limit (issue 15, item 4e).

c-int8 on EfficientNet-B0 raised RecursionError: the lowerer's constant folding walked
back through producers recursively, and the QDQ model is deep. A chain of 2,000
elementwise nodes reproduces it without EfficientNet, in FP32 and in QDQ form. A chain of
2,000 constant nodes checks what the iterative walk must keep doing: fold them all into
one tensor, computed as onnxruntime computes it.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import numpy as np
import pytest

from edgesmith.targets import ir, run
from tests.targets._helpers import _qdq, generate, ort_run

DEPTH = 2000
SHAPE = [1, 4, 4, 4]
pytestmark = pytest.mark.slow  # onnxruntime calibration of a deep chain: ~10 s


def _chain(path: Path, *, const_prefix: bool = False, depth: int = DEPTH) -> Path:
    """input -> (Mul by a per-channel constant, Add a constant) x depth/2 -> output.
    ``const_prefix``: instead, ``depth`` constant nodes fold into one tensor added to the input.
    Values stay near the input's scale, so INT8 keeps its resolution the whole way."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    nodes, inits = [], []
    if const_prefix:
        inits.append(numpy_helper.from_array(rng.uniform(-1, 1, SHAPE[1:]).astype(np.float32),
                                             "k"))
        prev = "k"
        for i in range(depth):
            inits.append(numpy_helper.from_array(np.float32(1.0 + 1e-4 * (i % 3)), f"c{i}"))
            nodes.append(helper.make_node("Mul", [prev, f"c{i}"], [f"k{i}"], name=f"fold{i}"))
            prev = f"k{i}"
        nodes.append(helper.make_node("Add", ["input", prev], ["output"], name="add"))
    else:
        prev = "input"
        for i in range(depth // 2):
            scale = rng.uniform(0.95, 1.05, (1, SHAPE[1], 1, 1)).astype(np.float32)
            inits += [numpy_helper.from_array(scale, f"m{i}"),
                      numpy_helper.from_array(np.float32(rng.uniform(-0.01, 0.01)), f"a{i}")]
            nodes += [helper.make_node("Mul", [prev, f"m{i}"], [f"x{i}"], name=f"mul{i}"),
                      helper.make_node("Add", [f"x{i}", f"a{i}"], [f"y{i}"], name=f"add{i}")]
            prev = f"y{i}"
        nodes[-1].output[0] = "output"
    dims = ["batch", *SHAPE[1:]]
    graph = helper.make_graph(
        nodes, "chain", [helper.make_tensor_value_info("input", TensorProto.FLOAT, dims)],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, dims)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


@contextlib.contextmanager
def recursion_limit(limit: int):
    """Far below Python's default 1,000, so a test does not depend on how deep the
    interpreter's own frames are: a recursive walk fails after ~limit/2 nodes, an
    iterative one does not care."""
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(limit)
    try:
        yield
    finally:
        sys.setrecursionlimit(old)


def test_a_2000_node_elementwise_chain_lowers_step_by_step(tmp_path):
    g = ir.lower(_chain(tmp_path / "chain.onnx"), "fp32")
    assert [st.op for st in g.steps] == ["Mul", "Add"] * (DEPTH // 2)


def test_a_2000_node_constant_chain_folds_into_one_add_matching_onnxruntime(tmp_path):
    src = _chain(tmp_path / "chain.onnx", const_prefix=True)
    g = ir.lower(src, "fp32")
    assert [st.op for st in g.steps] == ["Add"]
    x = np.random.default_rng(1).uniform(-1, 1, SHAPE).astype(np.float32)
    out = generate(src, tmp_path / "c")
    np.testing.assert_allclose(run.run(out, x), ort_run(src, x), rtol=1e-5, atol=1e-6)


def test_the_qdq_model_of_a_deep_chain_lowers_to_int8(tmp_path):
    # 400 float nodes become ~1,200 in QDQ form; onnxruntime's calibration of a deeper
    # chain takes minutes (superlinear in depth), the lowering itself is linear
    src = _chain(tmp_path / "chain.onnx", depth=400)
    calib = np.random.default_rng(2).uniform(-1, 1, (8, *SHAPE[1:])).astype(np.float32)
    qdq = _qdq(src, calib, tmp_path / "chain_qdq.onnx")
    with recursion_limit(300):
        g = ir.lower(qdq, "int8")
    assert len(g.steps) >= 400
