"""The consumer map the graph walks of convert/ and pipeline/sensitivity share: a tensor's
readers in graph order, a node that reads one tensor twice listed twice (the GELU matcher
and the fallback maps count readers, so a Mul(x, x) must not look like a single use)."""

from __future__ import annotations

from onnx import TensorProto, helper

from edgesmith.convert.onnx_graph import consumers_of


def test_consumers_are_each_tensors_readers_in_graph_order():
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu"),
             helper.make_node("Mul", ["a", "a"], ["b"], name="square"),
             helper.make_node("Add", ["x", "b"], ["y"], name="add")]
    vi = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1]) for n in ("x", "y")]
    graph = helper.make_graph(nodes, "g", vi[:1], vi[1:])

    got = {t: [n.name for n in ns] for t, ns in consumers_of(graph).items()}

    assert got == {"x": ["relu", "add"], "a": ["square", "square"], "b": ["add"]}
