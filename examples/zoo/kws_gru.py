"""A conv + GRU keyword-spotting network on 1-D features (N, C, T), defined here.

The shape of the small always-on audio nets that run on microcontrollers and phones
(e.g. the CRNN of Arik et al. 2017 "Convolutional Recurrent Neural Networks for
Small-Footprint Keyword Spotting"): a strided 1-D conv front end over log-mel frames,
a GRU over time, and a linear classifier on the last step. What it brings to a converter:
Conv1d, a recurrent op (ONNX ``GRU``) with its own gate layout, and a time-major slice.

``features`` is the input channel count (mel bins), ``hidden`` the GRU width, ``layers``
its depth. Any number of frames works.

    edgesmith build CKPT --arch examples/zoo/kws_gru.py:build --data examples/zoo/data.py:keywords
"""

from __future__ import annotations

import torch
from torch import nn


class KwsGRU(nn.Module):
    def __init__(self, num_classes: int = 12, features: int = 40, channels: int = 64,
                 hidden: int = 64, layers: int = 2):
        super().__init__()
        self.front = nn.Sequential(
            nn.Conv1d(features, channels, 5, stride=2, padding=2, bias=False),
            nn.BatchNorm1d(channels), nn.ReLU(inplace=True),
            nn.Conv1d(channels, channels, 3, padding=1, bias=False),
            nn.BatchNorm1d(channels), nn.ReLU(inplace=True))
        self.gru = nn.GRU(channels, hidden, num_layers=layers, batch_first=True)
        self.classifier = nn.Linear(hidden, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.front(x).transpose(1, 2)  # (N, C, T') -> (N, T', C): time steps for the GRU
        out, _ = self.gru(h)
        return self.classifier(out[:, -1])


def build(num_classes: int = 12, features: int = 40, hidden: int = 64, layers: int = 2,
          seed: int = 0) -> nn.Module:
    """The keyword-spotting net with freshly initialised weights, the same for a seed."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return KwsGRU(num_classes=num_classes, features=features, hidden=hidden,
                      layers=layers).eval()
