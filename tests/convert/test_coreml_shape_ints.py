"""Core ML converts models that turn a traced shape into a Python int (issue 15, item 4a).

Attention (``bsz * num_heads``), a GRU whose initial state is sized by ``x.size(0)`` and a
``view(x.size(0), -1)`` all trace to ``aten::Int`` on a 1-element tensor; coremltools 9.0
under numpy >= 2.4 failed all of them with "only 0-dimensional arrays can be converted to
Python scalars". The compat rules call these ops supported, so they must convert.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from edgesmith.convert.compat import _attrs
from edgesmith.convert.coreml import CoreMLTarget
from edgesmith.convert.export import export_onnx, trace_torchscript
from tests.convert._formats import make_ctx

pytestmark = pytest.mark.slow  # coremltools conversions: a few seconds each


class _GRUWithState(nn.Module):
    """Conv front end, GRU with an explicit zero state sized by the batch, linear head."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv1d(8, 16, 3, padding=1)
        self.gru = nn.GRU(16, 16, batch_first=True)
        self.fc = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x).transpose(1, 2)
        y, _ = self.gru(y, torch.zeros(1, x.size(0), 16))
        return self.fc(y.reshape(x.size(0), -1, 16)[:, -1])


class _TinyViT(nn.Module):
    """Patch embedding, one multi-head self-attention block, mean-pooled head."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.patch = nn.Conv2d(3, 16, 4, 4)
        self.attn = nn.MultiheadAttention(16, 2, batch_first=True)
        self.norm = nn.LayerNorm(16)
        self.fc = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = self.patch(x).flatten(2).transpose(1, 2)
        t = t + self.attn(t, t, t, need_weights=False)[0]
        return self.fc(self.norm(t).mean(1))


class _EncoderViT(nn.Module):
    """Patch embedding and a stock nn.TransformerEncoderLayer, as DeiT-style code writes it."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.patch = nn.Conv2d(3, 16, 4, 4)
        self.block = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True,
                                                norm_first=True)
        self.fc = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.block(self.patch(x).flatten(2).transpose(1, 2)).mean(1))


CASES = {"gru": (_GRUWithState, (8, 20)), "attention": (_TinyViT, (3, 16, 16)),
         "encoder": (_EncoderViT, (3, 16, 16))}


@pytest.mark.parametrize("name", list(CASES))
def test_models_with_traced_shape_ints_convert_to_core_ml(tmp_path, name):
    import numpy as np
    import onnx

    cls, shape = CASES[name]
    module = cls().eval()  # exported and traced as the pipeline does
    onnx_path = export_onnx(module, (1, *shape), tmp_path / name / "model.onnx")
    ts = trace_torchscript(module, (1, *shape), tmp_path / name / "model.ts")
    target = CoreMLTarget()
    model = onnx.load(str(onnx_path))
    ruled = {n.op_type: target.rule_for(n.op_type, _attrs(n), "fp32").status
             for n in model.graph.node}
    assert set(ruled.values()) == {"supported"}, ruled  # so the conversion must succeed
    calib = np.zeros((4, *shape), np.float32)
    art = target.convert(make_ctx(CoreMLTarget, "coreml", "fp32", onnx_path, calib, tmp_path,
                                  torchscript=ts))
    spec = art.meta["spec"]
    assert spec["ok"] and spec["inputs"][0]["shape"] == [1, *shape]
    assert spec["outputs"][0]["name"] == "output"
