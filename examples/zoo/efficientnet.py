"""EfficientNet-B0 (Tan & Le 2019) in torchvision's published layout, defined here.

MBConv blocks with SiLU (x * sigmoid(x)), squeeze-and-excitation with a sigmoid gate,
3x3 and 5x5 depthwise convs, 5.3 M parameters at 1000 classes: the deepest graph of the
zoo (16 blocks, ~250 ONNX nodes), which is what stresses recursive graph walkers.
``width``/``depth`` are the compound-scaling multipliers (B0 = 1.0/1.0); stochastic depth
is left out (it is the identity at inference). Any input size works (global pooling).

    edgesmith build CKPT --arch examples/zoo/efficientnet.py:build --data ...
"""

from __future__ import annotations

import math

import torch
from torch import nn

# expand ratio, kernel, stride, input channels, output channels, layers: B0's stages
STAGES = [(1, 3, 1, 32, 16, 1), (6, 3, 2, 16, 24, 2), (6, 5, 2, 24, 40, 2),
          (6, 3, 2, 40, 80, 3), (6, 5, 1, 80, 112, 3), (6, 5, 2, 112, 192, 4),
          (6, 3, 1, 192, 320, 1)]


def make_divisible(v: float, divisor: int = 8) -> int:
    """Round channels to a multiple of 8 without losing more than 10 % (torchvision's rule)."""
    new = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new + divisor if new < 0.9 * v else new


def conv_bn(cin: int, cout: int, k: int, stride: int = 1, groups: int = 1,
            act: bool = True) -> nn.Sequential:
    layers: list[nn.Module] = [nn.Conv2d(cin, cout, k, stride, (k - 1) // 2, groups=groups,
                                         bias=False), nn.BatchNorm2d(cout)]
    if act:
        layers.append(nn.SiLU(inplace=True))
    return nn.Sequential(*layers)


class SqueezeExcitation(nn.Module):
    """Global pool -> 1x1 reduce -> SiLU -> 1x1 expand -> sigmoid -> scale the input."""

    def __init__(self, channels: int, squeeze: int):
        super().__init__()
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(channels, squeeze, 1)
        self.fc2 = nn.Conv2d(squeeze, channels, 1)
        self.activation = nn.SiLU(inplace=True)
        self.scale_activation = nn.Sigmoid()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = self.fc2(self.activation(self.fc1(self.avgpool(x))))
        return x * self.scale_activation(s)


class MBConv(nn.Module):
    def __init__(self, cin: int, cout: int, expand: int, k: int, stride: int):
        super().__init__()
        self.use_res = stride == 1 and cin == cout
        hidden = make_divisible(cin * expand)
        layers: list[nn.Module] = [conv_bn(cin, hidden, 1)] if expand != 1 else []
        layers += [conv_bn(hidden, hidden, k, stride, groups=hidden),
                   SqueezeExcitation(hidden, max(1, cin // 4)),
                   conv_bn(hidden, cout, 1, act=False)]
        self.block = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.block(x) if self.use_res else self.block(x)


class EfficientNet(nn.Module):
    def __init__(self, num_classes: int = 10, width: float = 1.0, depth: float = 1.0,
                 in_ch: int = 3, dropout: float = 0.2):
        super().__init__()
        stem = make_divisible(32 * width)
        layers: list[nn.Module] = [conv_bn(in_ch, stem, 3, stride=2)]
        cin = stem
        for expand, k, stride, _, c, n in STAGES:
            cout = make_divisible(c * width)
            stage = []
            for i in range(int(math.ceil(n * depth))):
                stage.append(MBConv(cin, cout, expand, k, stride if i == 0 else 1))
                cin = cout
            layers.append(nn.Sequential(*stage))
        head = 4 * cin
        layers.append(conv_bn(cin, head, 1))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Dropout(dropout), nn.Linear(head, num_classes))
        _init(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.avgpool(self.features(x)).flatten(1))


def _init(model: nn.Module) -> None:
    """torchvision's initialisation: He (fan-out) convs, unit BN, uniform classifier."""
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out")
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Linear):
            bound = 1.0 / math.sqrt(m.out_features)
            nn.init.uniform_(m.weight, -bound, bound)
            nn.init.zeros_(m.bias)


def build(num_classes: int = 10, width: float = 1.0, depth: float = 1.0,
          seed: int = 0) -> nn.Module:
    """EfficientNet-B0 (or a scaled variant) with freshly initialised weights."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return EfficientNet(num_classes=num_classes, width=width, depth=depth).eval()
