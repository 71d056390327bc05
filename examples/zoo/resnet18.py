"""ResNet-18 (He et al. 2016) in torchvision's published layout, defined here.

A 7x7 stride-2 stem with max pooling, four stages of two basic blocks (3x3-3x3 with an
identity or 1x1-projection shortcut), global pooling and one linear layer: 11.7 M
parameters at 1000 classes, dense 3x3 convs, the residual adds INT8 must requantize.
``width`` scales the stage widths (64, 128, 256, 512 at 1.0); any input size works.

    edgesmith build CKPT --arch examples/zoo/resnet18.py:build --data ...
"""

from __future__ import annotations

import torch
from torch import nn


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                         nn.BatchNorm2d(cout))
                           if stride != 1 or cin != cout else None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class ResNet18(nn.Module):
    def __init__(self, num_classes: int = 10, width: float = 1.0, in_ch: int = 3):
        super().__init__()
        widths = [max(8, int(round(c * width))) for c in (64, 128, 256, 512)]
        self.conv1 = nn.Conv2d(in_ch, widths[0], 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(widths[0])
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        cin = widths[0]
        for i, cout in enumerate(widths, start=1):
            stride = 1 if i == 1 else 2
            setattr(self, f"layer{i}", nn.Sequential(BasicBlock(cin, cout, stride),
                                                     BasicBlock(cout, cout, 1)))
            cin = cout
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, num_classes)
        _init(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(self.avgpool(x).flatten(1))


def _init(model: nn.Module) -> None:
    """torchvision's initialisation: He (fan-out, ReLU) convs, unit BN."""
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)


def build(num_classes: int = 10, width: float = 1.0, seed: int = 0) -> nn.Module:
    """ResNet-18 with freshly initialised weights, the same for the same seed."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return ResNet18(num_classes=num_classes, width=width).eval()
