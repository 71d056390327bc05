"""The optimiser's parity check scales with the outputs (issue 15, item 4c).

A ViT build failed with "optimised graph differs from the export by 2.67e-05 (tolerance
1e-05)": float reordering in a deep graph with large outputs exceeds any fixed absolute
tolerance, while an optimiser bug still moves outputs by a visible fraction of their scale.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from edgesmith.convert import export, optimize
from edgesmith.errors import ConversionError


class _Block(nn.Module):
    """One pre-norm attention block written out as ViT code does (onnxslim folds its
    constant scale and shape arithmetic, which reorders float operations)."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        self.heads = heads

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, c = x.shape
        qkv = self.qkv(self.norm1(x)).reshape(b, n, 3, self.heads, c // self.heads)
        qkv = qkv.permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        att = (q @ k.transpose(-2, -1)) * (c // self.heads) ** -0.5
        x = x + self.proj((att.softmax(-1) @ v).transpose(1, 2).reshape(b, n, c))
        return x + self.mlp(self.norm2(x))


class _LargeLogitViT(nn.Module):
    """Class token, two blocks and a head whose logits are in the thousands, as trained
    nets' can be."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.patch = nn.Conv2d(3, 32, 4, 4)
        self.cls = nn.Parameter(torch.randn(1, 1, 32) * 0.02)
        self.pos = nn.Parameter(torch.randn(1, 17, 32) * 0.02)
        self.blocks = nn.Sequential(_Block(32, 2), _Block(32, 2))
        self.norm = nn.LayerNorm(32)
        self.head = nn.Linear(32, 10)
        with torch.no_grad():
            self.head.weight.mul_(1000.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = self.patch(x).flatten(2).transpose(1, 2)
        t = torch.cat([self.cls.expand(x.shape[0], -1, -1), t], 1) + self.pos
        return self.head(self.norm(self.blocks(t))[:, 0])


def test_float_reordering_on_large_outputs_passes_the_optimiser_check(tmp_path):
    src = export.export_onnx(_LargeLogitViT(), (1, 3, 16, 16), tmp_path / "vit.onnx")
    x = np.random.default_rng(0).standard_normal((64, 3, 16, 16)).astype(np.float32)
    res = optimize.optimize(src, tmp_path / "opt.onnx", x)
    assert res.max_abs_err > 1e-5  # what the old absolute tolerance refused
    assert res.max_abs_err / res.output_scale < 1e-6  # a few ulps: float reordering
    assert res.summary()["parity_tolerance"] == res.tolerance >= res.max_abs_err


@pytest.mark.parametrize("scale", [1e-3, 1.0, 1e4])
def test_an_error_of_a_visible_fraction_of_the_output_scale_is_still_refused(scale):
    ref = np.random.default_rng(1).standard_normal((32, 10)).astype(np.float32) * scale
    got = ref.copy()
    got[3, 4] += 1e-3 * np.abs(ref).max() + 2e-5  # 0.1 % of the scale: a rewrite bug
    with pytest.raises(ConversionError, match="output scale"):
        optimize.check_parity(ref, got, "opt.onnx")


def test_nan_in_the_optimised_outputs_is_refused():
    ref = np.ones((4, 3), np.float32)
    got = ref.copy()
    got[0, 0] = np.nan
    with pytest.raises(ConversionError, match="differs"):
        optimize.check_parity(ref, got, "opt.onnx")
