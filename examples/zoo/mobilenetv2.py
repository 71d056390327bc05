"""MobileNetV2 1.0 (Sandler et al. 2018) in torchvision's published layout, defined here.

torchvision cannot be imported beside the CPU torch this project installs (its wheel is
built against CUDA), so the zoo defines the network itself: same block table, same
channel rounding, same module nesting (``features``, ``conv``, ``classifier``) and
classifier. ``width`` is the width multiplier (1.0 = the
published net, 3.5 M parameters at 1000 classes); any input size works (global pooling).

    edgesmith build CKPT --arch examples/zoo/mobilenetv2.py:build --data ...
"""

from __future__ import annotations

import torch
from torch import nn

# (expansion t, output channels c, repeats n, first stride s): the paper's Table 2
SETTINGS = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
            (6, 160, 3, 2), (6, 320, 1, 1)]


def make_divisible(v: float, divisor: int = 8) -> int:
    """Round channels to a multiple of 8 without losing more than 10 % (torchvision's rule)."""
    new = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new + divisor if new < 0.9 * v else new


def conv_bn(cin: int, cout: int, k: int, stride: int = 1, groups: int = 1) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, k, stride, (k - 1) // 2, groups=groups, bias=False),
                         nn.BatchNorm2d(cout), nn.ReLU6(inplace=True))


class InvertedResidual(nn.Module):
    """1x1 expand -> 3x3 depthwise -> 1x1 linear projection, residual when shapes allow."""

    def __init__(self, cin: int, cout: int, stride: int, expand: int):
        super().__init__()
        hidden = int(round(cin * expand))
        self.use_res = stride == 1 and cin == cout
        layers: list[nn.Module] = [conv_bn(cin, hidden, 1)] if expand != 1 else []
        layers += [conv_bn(hidden, hidden, 3, stride, groups=hidden),
                   nn.Conv2d(hidden, cout, 1, bias=False), nn.BatchNorm2d(cout)]
        self.conv = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv(x) if self.use_res else self.conv(x)


class MobileNetV2(nn.Module):
    def __init__(self, num_classes: int = 10, width: float = 1.0, in_ch: int = 3,
                 dropout: float = 0.2):
        super().__init__()
        cin = make_divisible(32 * width)
        last = make_divisible(1280 * max(1.0, width))
        layers: list[nn.Module] = [conv_bn(in_ch, cin, 3, stride=2)]
        for t, c, n, s in SETTINGS:
            cout = make_divisible(c * width)
            for i in range(n):
                layers.append(InvertedResidual(cin, cout, s if i == 0 else 1, t))
                cin = cout
        layers.append(conv_bn(cin, last, 1))
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Dropout(dropout), nn.Linear(last, num_classes))
        _init(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.pool(self.features(x)).flatten(1))


def _init(model: nn.Module) -> None:
    """torchvision's initialisation: He (fan-out) convs, unit BN, small normal classifier."""
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out")
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, 0, 0.01)
            nn.init.zeros_(m.bias)


def build(num_classes: int = 10, width: float = 1.0, seed: int = 0) -> nn.Module:
    """MobileNetV2 with freshly initialised weights, the same for the same seed."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return MobileNetV2(num_classes=num_classes, width=width).eval()
