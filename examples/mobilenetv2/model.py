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
    """Random-weight model, deterministic for a seed, with BN statistics that fit its data.

    BN running statistics are estimated on ``sample_data`` inputs (one pass in train
    mode), as training would leave them; with the default mean 0 / var 1 the activations
    collapse through the depth and every input gets the same logits.
    """
    g = torch.Generator().manual_seed(seed)
    model = MobileNetV2Style()
    for m in model.modules():
        if isinstance(m, nn.Conv2d):  # torchvision's init
            nn.init.kaiming_normal_(m.weight, mode="fan_out", generator=g)
        elif isinstance(m, nn.BatchNorm2d):
            m.weight.data.copy_(torch.rand(m.num_features, generator=g) * 0.5 + 0.75)
            m.bias.data.copy_(torch.randn(m.num_features, generator=g) * 0.1)
            m.momentum = None  # cumulative average over the estimation pass
        elif isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, std=0.1, generator=g)
            nn.init.zeros_(m.bias)
    model.train()
    with torch.no_grad():
        model(_inputs(128, seed + 7))
    return model.eval()


def _inputs(n: int, seed: int) -> torch.Tensor:
    """Smooth random images with per-sample colour offsets (white noise averages out)."""
    g = torch.Generator().manual_seed(seed)
    c, h, w = INPUT_SHAPE
    coarse = torch.randn(n, c, h // 8, w // 8, generator=g)
    x = nn.functional.interpolate(coarse, size=(h, w), mode="bilinear", align_corners=False)
    return x + torch.randn(n, c, 1, 1, generator=g) + 0.1 * torch.randn(n, c, h, w, generator=g)


def sample_data(n: int = 256, seed: int = 0):
    """Inputs and the model's own labels, for calibration and parity checks."""
    x = _inputs(n, seed + 1)
    with torch.no_grad():
        y = build(seed)(x).argmax(1)
    return x.numpy(), y.numpy()
