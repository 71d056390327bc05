"""The TorchScript copy (what Core ML converts from) traces the model once: torch's
check_trace traced and ran it again on the same input, ~12 s of CPU in a MobileNetV2-96
build, and its output warnings were ignored anyway."""

from __future__ import annotations

import torch

from edgesmith.convert.export import trace_torchscript


class _Counting(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return self.conv(x).relu()


def test_torchscript_trace_runs_the_model_once_and_loads_back(tmp_path):
    model = _Counting().eval()
    path = trace_torchscript(model, (1, 3, 8, 8), tmp_path / "m.ts")
    assert model.calls == 1
    x = torch.randn(2, 3, 8, 8)
    with torch.no_grad():
        torch.testing.assert_close(torch.jit.load(str(path))(x), model(x))
