"""Networks the tiling tests share: BatchNorm with moved statistics, so that folding it
changes the weights and a wrong window or padding in a patch shows in the output."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tests.targets._helpers import _qdq, export


def move_bn_statistics(model):
    """Every BatchNorm2d's running mean in [-0.2, 0.2) and variance in [0.5, 2) (the
    caller seeds torch); returns the model. Fresh statistics (0, 1) fold to the identity,
    which would hide a patch that reads the wrong rows of a channel."""
    import torch.nn as nn

    for mod in model.modules():
        if isinstance(mod, nn.BatchNorm2d):
            mod.running_mean.uniform_(-0.2, 0.2)
            mod.running_var.uniform_(0.5, 2.0)
    return model


def mbv2_style():
    """stem 3x3 s2 -> IR(t=1) -> IR(t=6, s2) -> IR(t=6) + skip -> IR(t=6) + skip -> head:
    MobileNetV2's first stages and widths, BN with moved statistics."""
    import torch
    import torch.nn as nn

    torch.manual_seed(0)

    def cbr(i, o, k=3, s=1, g=1):
        return [nn.Conv2d(i, o, k, s, k // 2, groups=g, bias=False), nn.BatchNorm2d(o),
                nn.ReLU6()]

    class IR(nn.Module):
        def __init__(self, cin, cout, s, t):
            super().__init__()
            hid = cin * t
            layers = (cbr(cin, hid, 1) if t != 1 else []) + cbr(hid, hid, 3, s, hid)
            self.conv = nn.Sequential(*layers, nn.Conv2d(hid, cout, 1, bias=False),
                                      nn.BatchNorm2d(cout))
            self.res = s == 1 and cin == cout

        def forward(self, x):
            return x + self.conv(x) if self.res else self.conv(x)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(*cbr(3, 32, 3, 2))
            self.b1, self.b2 = IR(32, 16, 1, 1), IR(16, 24, 2, 6)
            self.b3, self.b4 = IR(24, 24, 1, 6), IR(24, 24, 1, 6)
            self.head = nn.Sequential(nn.Conv2d(24, 32, 1), nn.AdaptiveAvgPool2d(1),
                                      nn.Flatten(), nn.Linear(32, 5))

        def forward(self, x):
            return self.head(self.b4(self.b3(self.b2(self.b1(self.stem(x))))))

    return move_bn_statistics(Net().eval())


def quantized_pair(model, shape: tuple[int, ...], folder: Path, stem: str, seed: int):
    """``model`` exported to ``folder/<stem>.onnx`` and quantized to static QDQ
    ``<stem>_q.onnx`` on 16 random calibration samples drawn from ``seed``; returns
    (fp32, qdq, rng) with ``rng`` past that draw, so the caller's inputs come next from the
    same seeded stream."""
    import torch

    fp32 = export(model, torch.randn(1, *shape), folder / f"{stem}.onnx")
    rng = np.random.default_rng(seed)
    calib = rng.standard_normal((16, *shape)).astype(np.float32)
    return fp32, _qdq(fp32, calib, folder / f"{stem}_q.onnx"), rng
