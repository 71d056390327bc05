"""A small single-stage detector: MobileNet-style backbone, upsample + concat neck,
anchor-free YOLO/FCOS-style heads at strides 8 and 16.

    edgesmith build examples/detect/model.py:build --data DIR --task detect --profile host

``build()`` is the trained detector (the checkpoint ``examples/detect/train.py`` caches);
``arch()`` the same network untrained. The model has **two outputs on purpose**, one per
stride, each ``(N, 4 + 1 + K, H/s, W/s)`` with channels

    0..3  l, t, r, b: distances from the cell centre to the box edges, in strides
          (used as max(d, 0) * stride: linear, so INT8 error is a fixed fraction of a cell)
    4     objectness logit
    5..   one logit per class

Decoding and NMS are not in the graph (``edgesmith.pipeline.detection`` in Python,
``es_detect_decode`` + ``es_nms`` in the C runtime): a camera product gets boxes, and
every converter only has to carry convolutions.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
from torch import nn

STRIDES = (8, 16)
NUM_CLASSES = 4
CHECKPOINT = "detector-scenes128.pt"


def conv_bn_relu(cin: int, cout: int, k: int = 3, stride: int = 1, groups: int = 1
                 ) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False),
                         nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


def dw_separable(cin: int, cout: int, stride: int = 1) -> nn.Sequential:
    """MobileNet v1's block: depthwise 3x3 then pointwise 1x1, each with BN + ReLU."""
    return nn.Sequential(conv_bn_relu(cin, cin, 3, stride, groups=cin),
                         conv_bn_relu(cin, cout, 1))


class Head(nn.Module):
    """One level's predictions: a shared depthwise-separable block, then a 1x1 conv to
    4 box distances + objectness + K class logits."""

    def __init__(self, cin: int, num_classes: int):
        super().__init__()
        self.block = dw_separable(cin, cin)
        self.pred = nn.Conv2d(cin, 5 + num_classes, 1)
        with torch.no_grad():  # start with few confident cells (focal-loss style prior)
            self.pred.bias[4:].fill_(-4.0)
            self.pred.bias[:4].fill_(1.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pred(self.block(x))


class Detector(nn.Module):
    def __init__(self, num_classes: int = NUM_CLASSES, width: int = 16):
        super().__init__()
        w = width
        self.stem = conv_bn_relu(3, w, 3, 2)                                   # /2
        self.stage1 = nn.Sequential(dw_separable(w, 24, 2), dw_separable(24, 24))   # /4
        self.stage2 = nn.Sequential(dw_separable(24, 40, 2), dw_separable(40, 40))  # /8
        self.stage3 = nn.Sequential(dw_separable(40, 64, 2), dw_separable(64, 64))  # /16
        self.lateral = conv_bn_relu(64, 48, 1)
        self.up = nn.Upsample(scale_factor=2, mode="nearest")
        self.fuse = dw_separable(40 + 48, 48)
        self.head8 = Head(48, num_classes)
        self.head16 = Head(48, num_classes)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        c3 = self.stage2(self.stage1(self.stem(x)))
        p4 = self.lateral(self.stage3(c3))
        p3 = self.fuse(torch.cat([c3, self.up(p4)], dim=1))
        return self.head8(p3), self.head16(p4)


def arch(num_classes: int = NUM_CLASSES) -> nn.Module:
    """The detector with seeded random weights (what train.py starts from)."""
    torch.manual_seed(0)
    return Detector(num_classes)


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "edgesmith" / "detect"


def build() -> nn.Module:
    """The trained detector from the cache. Missing checkpoint: a message saying how to
    make it (training takes a few CPU minutes), not a silently random network whose
    mAP would be ~0."""
    path = cache_dir() / CHECKPOINT
    if not path.is_file():
        raise FileNotFoundError(
            f"no trained detector at {path}; train it first: "
            "python examples/detect/train.py (about 2 minutes on one idle core), or use "
            "examples/detect/model.py:arch for the untrained network")
    model = arch()
    model.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
    return model.eval()
