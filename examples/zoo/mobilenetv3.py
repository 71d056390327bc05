"""MobileNetV3-small (Howard et al. 2019) in torchvision's published layout, defined here.

What makes it hard for converters and INT8: hardswish and hardsigmoid activations,
squeeze-and-excitation (a global pool whose result multiplies the feature map, i.e. a
broadcast Mul), 5x5 depthwise convs and a two-layer classifier with hardswish between.
``width`` is the width multiplier (1.0 = the published net, 2.5 M parameters at 1000
classes); any input size works (global pooling).

    edgesmith build CKPT --arch examples/zoo/mobilenetv3.py:build --data ...
"""

from __future__ import annotations

import torch
from torch import nn

# kernel, expanded channels, output channels, SE, activation (RE/HS), stride: Table 2 of the
# paper, as torchvision's mobilenet_v3_small
SETTINGS = [
    (3, 16, 16, True, "RE", 2),
    (3, 72, 24, False, "RE", 2),
    (3, 88, 24, False, "RE", 1),
    (5, 96, 40, True, "HS", 2),
    (5, 240, 40, True, "HS", 1),
    (5, 240, 40, True, "HS", 1),
    (5, 120, 48, True, "HS", 1),
    (5, 144, 48, True, "HS", 1),
    (5, 288, 96, True, "HS", 2),
    (5, 576, 96, True, "HS", 1),
    (5, 576, 96, True, "HS", 1),
]


def make_divisible(v: float, divisor: int = 8) -> int:
    """Round channels to a multiple of 8 without losing more than 10 % (torchvision's rule)."""
    new = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new + divisor if new < 0.9 * v else new


def _act(kind: str) -> nn.Module:
    return nn.Hardswish(inplace=True) if kind == "HS" else nn.ReLU(inplace=True)


def conv_bn(cin: int, cout: int, k: int, stride: int = 1, groups: int = 1,
            act: str | None = "HS") -> nn.Sequential:
    # torchvision's eps; PyTorch's default momentum (0.1), not torchvision's 0.01: that one
    # suits 600 ImageNet epochs, while in a 12-epoch CPU run the running statistics lag the
    # weights so far that the eval-mode net scored chance (10.0 % calib top-1 at every epoch
    # while the training loss fell from 2.27 to 0.56)
    layers: list[nn.Module] = [nn.Conv2d(cin, cout, k, stride, (k - 1) // 2, groups=groups,
                                         bias=False), nn.BatchNorm2d(cout, eps=0.001)]
    if act is not None:
        layers.append(_act(act))
    return nn.Sequential(*layers)


class SqueezeExcitation(nn.Module):
    """Global pool -> 1x1 reduce -> ReLU -> 1x1 expand -> hardsigmoid -> scale the input."""

    def __init__(self, channels: int, squeeze: int):
        super().__init__()
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(channels, squeeze, 1)
        self.fc2 = nn.Conv2d(squeeze, channels, 1)
        self.activation = nn.ReLU()
        self.scale_activation = nn.Hardsigmoid()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = self.fc2(self.activation(self.fc1(self.avgpool(x))))
        return x * self.scale_activation(s)


class InvertedResidual(nn.Module):
    def __init__(self, cin: int, k: int, exp: int, cout: int, se: bool, act: str, stride: int):
        super().__init__()
        self.use_res = stride == 1 and cin == cout
        layers: list[nn.Module] = [conv_bn(cin, exp, 1, act=act)] if exp != cin else []
        layers.append(conv_bn(exp, exp, k, stride, groups=exp, act=act))
        if se:
            layers.append(SqueezeExcitation(exp, make_divisible(exp // 4)))
        layers.append(conv_bn(exp, cout, 1, act=None))
        self.block = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.block(x) if self.use_res else self.block(x)


class MobileNetV3Small(nn.Module):
    def __init__(self, num_classes: int = 10, width: float = 1.0, in_ch: int = 3,
                 dropout: float = 0.2):
        super().__init__()
        cin = make_divisible(16 * width)
        layers: list[nn.Module] = [conv_bn(in_ch, cin, 3, stride=2, act="HS")]
        for k, exp, cout, se, act, s in SETTINGS:
            exp, cout = make_divisible(exp * width), make_divisible(cout * width)
            layers.append(InvertedResidual(cin, k, exp, cout, se, act, s))
            cin = cout
        head = 6 * cin
        layers.append(conv_bn(cin, head, 1, act="HS"))
        self.features = nn.Sequential(*layers)
        last = make_divisible(1024 * width)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(
            nn.Linear(head, last), nn.Hardswish(inplace=True), nn.Dropout(dropout),
            nn.Linear(last, num_classes))
        _init(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.avgpool(self.features(x)).flatten(1))


def _init(model: nn.Module) -> None:
    """torchvision's initialisation: He (fan-out) convs, unit BN, small normal linears."""
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out")
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, 0, 0.01)
            nn.init.zeros_(m.bias)


def build(num_classes: int = 10, width: float = 1.0, seed: int = 0) -> nn.Module:
    """MobileNetV3-small with freshly initialised weights, the same for the same seed."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return MobileNetV3Small(num_classes=num_classes, width=width).eval()
