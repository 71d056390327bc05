"""The demo network: a small CNN for sklearn's 8x8 digits.

It is small enough to train in seconds on a CPU, and it deliberately contains the
structures that trip converters and pruners in real models: conv-bn-relu blocks, a
depthwise conv, a residual add, global pooling and a linear classifier.
"""

import torch
from torch import nn


def conv_bn_relu(cin: int, cout: int, *, stride: int = 1, groups: int = 1) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, stride=stride, padding=1, groups=groups, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU(inplace=True),
    )


class DigitsNet(nn.Module):
    def __init__(self, width: int = 32, num_classes: int = 10):
        super().__init__()
        self.stem = conv_bn_relu(1, width)
        self.block1 = conv_bn_relu(width, width)
        self.dw = conv_bn_relu(width, width, groups=width)  # depthwise
        self.pw = nn.Sequential(nn.Conv2d(width, width, 1, bias=False), nn.BatchNorm2d(width))
        self.down = conv_bn_relu(width, 2 * width, stride=2)
        self.block2 = conv_bn_relu(2 * width, 2 * width)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Linear(2 * width, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        y = self.block1(x)
        y = self.pw(self.dw(y))
        x = torch.relu(x + y)  # residual add
        x = self.block2(self.down(x))
        x = self.pool(x).flatten(1)
        return self.classifier(x)


def build(width: int = 32, num_classes: int = 10) -> nn.Module:
    """Untrained DigitsNet; ``make demo`` trains it and saves ``digits.pt``."""
    torch.manual_seed(0)
    return DigitsNet(width, num_classes)
