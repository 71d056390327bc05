"""HardSwish, Sigmoid, SiLU (Mul(x, Sigmoid(x))) and HardSigmoid after an fp32 Conv or Gemm
run in the kernel's epilogue (ES_ACT_HARDSWISH..ES_ACT_HARDSIGMOID) instead of as separate
passes over memory. The fast kernels' vector sigmoid (a polynomial e^x, not expf) agrees
with the reference kernel to 1e-5 of the output magnitude on the GEMM's and the depthwise
kernel's edge shapes, portable / AVX2 / AVX-512 / aarch64 under qemu; a generated model
with every fused form, fast or reference kernels, agrees with onnxruntime; a SiLU whose x
has another reader is not fused."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest

from tests.targets.test_f32_fast import build_f32_check
from tests.targets.test_int8_fast import FLAVOURS

FUSED = (4, 5, 6, 7)  # ES_ACT_HARDSWISH, _SIGMOID, _SILU, _HARDSIGMOID (edgesmith_rt.h)

# C H W M KH KW SH SW PT PL DH DW group (act, seed, OH, OW follow): the paths an epilogue
# lives on
GEOMETRIES = [
    [96, 1, 1, 24, 1, 1, 1, 1, 0, 0, 1, 1, 1],    # 1x1 on 1x1: channels in the lanes
    [40, 7, 7, 20, 1, 1, 1, 1, 0, 0, 1, 1, 1],    # 49 pixels: 32 in place + 17 masked
    [3, 15, 17, 13, 3, 3, 2, 2, 1, 1, 1, 1, 1],   # stride-2 stem through the phases, M = 13
    [19, 6, 8, 9, 1, 1, 1, 1, 0, 0, 1, 1, 1],     # a last tile of exactly 16
    [21, 13, 11, 21, 3, 3, 1, 1, 1, 1, 1, 1, 21],  # depthwise 3x3 s1: the phase kernel
    [18, 17, 9, 18, 5, 5, 2, 2, 2, 2, 1, 1, 18],  # depthwise 5x5 s2, 9 x 5 out
    [35, 5, 5, 35, 3, 3, 1, 1, 1, 1, 1, 1, 35],   # depthwise on 5x5: 16 channels in lanes
]


def _cases():
    for i, g in enumerate(GEOMETRIES):
        oh = (g[1] + 2 * g[8] - g[10] * (g[4] - 1) - 1) // g[6] + 1
        ow = (g[2] + 2 * g[9] - g[11] * (g[5] - 1) - 1) // g[7] + 1
        for act in FUSED:
            yield [*g, act, 300 + i, oh, ow]


@pytest.mark.parametrize(("name", "cc", "flags", "wrapper"), FLAVOURS)
def test_fused_activations_in_fast_f32_kernels_match_reference(name, cc, flags, wrapper,
                                                                tmp_path):
    b = build_f32_check(tmp_path / f"check_{name}", cc, flags, name)
    for args in _cases():
        p = subprocess.run([*wrapper, str(b), *map(str, args)], capture_output=True, text=True,
                           timeout=60)
        assert p.returncode == 0, f"{name} {args}: {p.stdout}{p.stderr}"


def _net():
    """Every fused form once: Conv-BN-HardSwish, a depthwise Conv-BN-SiLU, MobileNetV3's
    squeeze-excite (pool, 1x1, ReLU, 1x1, HardSigmoid, scale), a Conv-Sigmoid, a
    Linear-HardSwish and a Linear-SiLU."""
    import torch
    from torch import nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1), nn.BatchNorm2d(16),
                                      nn.Hardswish())
            self.dw = nn.Sequential(nn.Conv2d(16, 16, 5, 1, 2, groups=16), nn.BatchNorm2d(16),
                                    nn.SiLU())
            self.se = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(16, 8, 1), nn.ReLU(),
                                    nn.Conv2d(8, 16, 1), nn.Hardsigmoid())
            self.gate = nn.Sequential(nn.Conv2d(16, 12, 1), nn.Sigmoid())
            self.head = nn.Sequential(nn.Flatten(), nn.Linear(12 * 7 * 8, 20), nn.Hardswish(),
                                      nn.Linear(20, 10), nn.SiLU())

        def forward(self, x):
            y = self.dw(self.stem(x))
            return self.head(self.gate(y * self.se(y)))

    torch.manual_seed(0)
    net = Net().eval()
    for m in net.modules():  # BN statistics that are not the identity
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
    return net


@pytest.mark.parametrize("kernels", ["fast", "reference"])
def test_generated_model_fuses_hardswish_sigmoid_silu_and_matches_onnxruntime(kernels,
                                                                              tmp_path):
    import torch

    from edgesmith.targets import codegen, run
    from edgesmith.targets.ir import lower
    from edgesmith.targets.planner import plan
    from tests.targets._helpers import export, ort_run

    x = torch.randn(1, 3, 13, 15) * 2
    onnx_path = export(_net(), x, tmp_path / "m.onnx")
    g = lower(onnx_path, "fp32", kernels=kernels)
    acts = sorted(c.args[-1]["act"] for st in g.steps for c in st.calls
                  if isinstance(c.args[-1], dict) and "act" in c.args[-1])
    unary = [c for st in g.steps for c in st.calls if c.fn == "es_unary_f32"]
    assert not unary, [c.args[-1] for c in unary]
    assert set(FUSED) <= set(acts), acts
    out = tmp_path / "c"
    codegen.generate(g, plan(g), out)
    run.build(out)
    np.testing.assert_allclose(run.run(out, x.numpy()), ort_run(onnx_path, x.numpy()),
                               rtol=1e-4, atol=1e-5)


def test_silu_whose_input_has_another_reader_is_not_fused(tmp_path):
    """x * sigmoid(x) + x: the conv's output is read three times, so it must stay in memory
    and the Sigmoid and Mul run as their own steps."""
    import torch
    from torch import nn

    from edgesmith.targets import run
    from edgesmith.targets.ir import lower
    from tests.targets._helpers import export, generate, ort_run

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 8, 3, 1, 1)

        def forward(self, x):
            y = self.conv(x)
            return y * torch.sigmoid(y) + y

    torch.manual_seed(1)
    x = torch.randn(1, 3, 9, 10)
    onnx_path = export(Net().eval(), x, tmp_path / "m.onnx")
    fns = [c.fn for st in lower(onnx_path, "fp32").steps for c in st.calls]
    assert "es_unary_f32" in fns and fns.count("es_binary_f32") == 2, fns
    out = generate(onnx_path, tmp_path / "c", precision="fp32")
    np.testing.assert_allclose(run.run(out, x.numpy()), ort_run(onnx_path, x.numpy()),
                               rtol=1e-4, atol=1e-5)
