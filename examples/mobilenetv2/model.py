"""A MobileNetV2-style network defined here, so benchmarks and tests need no download.

Inverted residual blocks (1x1 expand, 3x3 depthwise, 1x1 linear project), ReLU6 and
residual adds: the structure that stresses depthwise kernels, requantization of adds and
layout handling in converters. Random weights with a fixed seed; BN statistics are
perturbed so folding them is not a no-op.
"""

import torch
from torch import nn


def _conv_bn(cin: int, cout: int, k: int, stride: int = 1, groups: int = 1,
             act: bool = True) -> nn.Sequential:
    layers: list[nn.Module] = [
        nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False),
        nn.BatchNorm2d(cout),
    ]
    if act:
        layers.append(nn.ReLU6(inplace=True))
    return nn.Sequential(*layers)


class InvertedResidual(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, expand: int):
        super().__init__()
        hidden = cin * expand
        self.use_res = stride == 1 and cin == cout
        layers: list[nn.Module] = []
        if expand != 1:
            layers.append(_conv_bn(cin, hidden, 1))
        layers += [_conv_bn(hidden, hidden, 3, stride, groups=hidden),
                   _conv_bn(hidden, cout, 1, act=False)]
        self.block = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.block(x) if self.use_res else self.block(x)


# (expand, out channels, repeats, first stride), a scaled-down MobileNetV2 table
SETTINGS = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 2, 2), (6, 96, 1, 1)]


class MobileNetV2Style(nn.Module):
    def __init__(self, num_classes: int = 10, in_ch: int = 3, width: int = 16):
        super().__init__()
        layers: list[nn.Module] = [_conv_bn(in_ch, width, 3, stride=2)]
        cin = width
        for t, c, n, s in SETTINGS:
            for i in range(n):
                layers.append(InvertedResidual(cin, c, s if i == 0 else 1, t))
                cin = c
        layers.append(_conv_bn(cin, 256, 1))
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Linear(256, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.pool(self.features(x)).flatten(1))


INPUT_SHAPE = (3, 64, 64)


def build(seed: int = 0) -> nn.Module:
    """Random-weight model, deterministic for a seed, with non-trivial BN statistics."""
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = MobileNetV2Style()
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.1)
            m.running_var.copy_(torch.rand(m.num_features, generator=g) * 0.5 + 0.75)
            m.weight.data.copy_(torch.rand(m.num_features, generator=g) * 0.5 + 0.75)
            m.bias.data.copy_(torch.randn(m.num_features, generator=g) * 0.1)
    return model.eval()


def sample_data(n: int = 256, seed: int = 0):
    """Random inputs and labels from the model itself, for calibration and parity checks."""
    g = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(n, *INPUT_SHAPE, generator=g)
    with torch.no_grad():
        y = build(seed)(x).argmax(1)
    return x.numpy(), y.numpy()
