"""An fp32 Add whose only reader is a Relu runs as one step (es_binary_f32 with
ES_B_ADD_RELU): a ResNet block's residual sum and its Relu were two passes over the plane.
The generated model matches onnxruntime with the fast and the reference kernels, on the
same-shape path and the broadcast path; an Add whose sum is also read elsewhere keeps its
Relu as a step of its own."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from edgesmith.targets import codegen, run
from edgesmith.targets.ir import lower
from edgesmith.targets.planner import plan
from tests.targets._helpers import export, ort_run


class Block(nn.Module):
    """A ResNet basic block with its sum's Relu, plus a broadcast Add (a per-channel
    constant) and its Relu."""

    def __init__(self):
        super().__init__()
        self.a = nn.Sequential(nn.Conv2d(8, 8, 3, 1, 1), nn.BatchNorm2d(8), nn.ReLU())
        self.b = nn.Sequential(nn.Conv2d(8, 8, 3, 1, 1), nn.BatchNorm2d(8))
        self.bias = nn.Parameter(torch.linspace(-1.0, 1.0, 8).reshape(8, 1, 1))

    def forward(self, x):
        y = torch.relu(self.b(self.a(x)) + x)
        return torch.relu(y + self.bias)


class Shared(nn.Module):
    """The sum is read by its Relu and by a Mul, so the Relu cannot overwrite it."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 3, 1, 1)

    def forward(self, x):
        s = self.conv(x) + x
        return torch.relu(s) + s * 0.5


def _binary_ops(g) -> list[str]:
    return [c.args[3] for st in g.steps for c in st.calls if c.fn == "es_binary_f32"]


def _unary(g) -> list:
    return [c for st in g.steps for c in st.calls if c.fn == "es_unary_f32"]


@pytest.mark.parametrize("kernels", ["fast", "reference"])
def test_add_then_relu_is_one_step_and_matches_onnxruntime(kernels, tmp_path):
    torch.manual_seed(0)
    net = Block().eval()
    x = torch.randn(1, 8, 11, 13)
    onnx_path = export(net, x, tmp_path / "m.onnx")
    g = lower(onnx_path, "fp32", kernels=kernels)
    assert _binary_ops(g) == ["ES_B_ADD_RELU", "ES_B_ADD_RELU"], _binary_ops(g)
    assert not _unary(g), [c.args[-1] for c in _unary(g)]
    out = tmp_path / "c"
    codegen.generate(g, plan(g), out)
    run.build(out)
    got = run.run(out, x.numpy())
    want = ort_run(onnx_path, x.numpy())
    assert (want == 0).mean() > 0.1  # the Relu clips a share of the values: it is tested
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_add_whose_sum_is_read_elsewhere_keeps_its_relu(tmp_path):
    torch.manual_seed(1)
    x = torch.randn(1, 4, 7, 9)
    onnx_path = export(Shared().eval(), x, tmp_path / "m.onnx")
    g = lower(onnx_path, "fp32")
    assert "ES_B_ADD_RELU" not in _binary_ops(g), _binary_ops(g)
    assert [c.args[-1]["op"] for c in _unary(g)] == ["ES_U_RELU"]
    out = tmp_path / "c"
    codegen.generate(g, plan(g), out)
    run.build(out)
    want = ort_run(onnx_path, x.numpy())
    assert (want < 0).any()  # the negative sums reach the output past the Relu
    np.testing.assert_allclose(run.run(out, x.numpy()), want, rtol=1e-4, atol=1e-5)
