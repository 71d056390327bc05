"""An exact GELU reaches TFLite as its builtin GELU (issue 15: the trained ViT's tflite).

torch's nn.GELU() exports as Div -> Erf -> Add -> Mul -> Mul. onnx2tf recognises that
subgraph only when the divisor comes from a Constant node, which onnxslim had turned into
an initializer; the copy handed to onnx2tf gets the Constant node back
(convert/_onnx_gelu.py), computes the same, and converts to one GELU op and no Flex op.
Anything that only looks like the pattern is left alone; a lone Erf becomes onnx2tf's
written-out arithmetic instead (test_compat_rules: tflite-Erf-lowered).
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
from torch import nn

from edgesmith.convert._onnx_gelu import mark_exact_gelus
from tests.convert._formats import export, make_ctx, onnx_run

SHAPE = (3, 8, 8)


class _Net(nn.Module):
    """1x1 conv -> f -> 1x1 conv, so the converters have weights on both sides."""

    def __init__(self, f):
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b, self.f = nn.Conv2d(3, 6, 1), nn.Conv2d(6, 3, 1), f

    def forward(self, x):
        return self.b(self.f(self.a(x)))


def _ops(path) -> list[str]:
    return [n.op_type for n in onnx.load(str(path)).graph.node]


def test_exact_gelu_divisor_comes_from_a_constant_node_and_computes_the_same(tmp_path):
    import onnxslim

    path, _ = export(_Net(nn.GELU()), SHAPE, tmp_path)
    slim = tmp_path / "slim.onnx"
    onnx.save(onnxslim.slim(onnx.load(str(path))), str(slim))  # as static_batch does
    m = onnx.load(str(slim))
    div = next(n for n in m.graph.node if n.op_type == "Div")
    assert div.input[1] in {i.name for i in m.graph.initializer}  # what onnx2tf misses
    assert mark_exact_gelus(m) == 1
    div = next(n for n in m.graph.node if n.op_type == "Div")
    const = next(n for n in m.graph.node if div.input[1] in n.output)
    assert const.op_type == "Constant"
    assert [n.op_type for n in m.graph.node] == ["Conv", "Constant", "Div", "Erf", "Add", "Mul",
                                                 "Mul", "Conv"]
    onnx.checker.check_model(m, full_check=True)
    marked = tmp_path / "marked.onnx"
    onnx.save(m, str(marked))
    x = np.random.default_rng(0).standard_normal((2, *SHAPE)).astype(np.float32)
    np.testing.assert_array_equal(onnx_run(marked, x), onnx_run(slim, x))


def _gelu_with_erf_reused(x):
    """The exact GELU written out, its Erf also read by an Add: not one GELU any more."""
    e = torch.erf(x / 2 ** 0.5)
    return x * (1 + e) * 0.5 + e


@pytest.mark.parametrize("f", [torch.erf, nn.GELU(approximate="tanh"), _gelu_with_erf_reused],
                         ids=["lone-erf", "gelu-tanh", "gelu-erf-reused"])
def test_what_only_looks_like_an_exact_gelu_is_left_alone(tmp_path, f):
    path, _ = export(_Net(f), SHAPE, tmp_path)
    m = onnx.load(str(path))
    assert mark_exact_gelus(m) == 0
    assert [n.op_type for n in m.graph.node] == _ops(path)


@pytest.mark.slow
def test_tflite_of_an_exact_gelu_has_the_builtin_gelu_and_no_flex_op(tmp_path):
    from ai_edge_litert.interpreter import Interpreter

    from edgesmith.convert.tflite import TFLiteTarget

    path, _ = export(_Net(nn.GELU()), SHAPE, tmp_path / "m")
    x = np.random.default_rng(1).standard_normal((4, *SHAPE)).astype(np.float32)
    ctx = make_ctx(TFLiteTarget, "tflite", "fp32", path, x, tmp_path / "out")
    art = TFLiteTarget().convert(ctx)
    ops = {d["op_name"] for d in Interpreter(model_path=str(art.path))._get_ops_details()}
    assert "GELU" in ops and not any(o.startswith("Flex") for o in ops), ops
    y = TFLiteTarget().runner(art)(x[:1])
    np.testing.assert_allclose(y, onnx_run(path, x[:1]), atol=1e-4)
