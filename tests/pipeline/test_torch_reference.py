"""The torch reference forward: one thread while it runs (measured cheaper on a shared
machine), the caller's thread count back afterwards, outputs as the model gives them."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from edgesmith.pipeline import stages


class _Probe(torch.nn.Module):
    """A linear layer that records the thread count and batch of every call."""

    def __init__(self, fail: bool = False) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(6, 3)
        self.seen: list[tuple[int, int]] = []
        self.fail = fail

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen.append((torch.get_num_threads(), len(x)))
        if self.fail:
            raise RuntimeError("boom")
        return self.fc(x)


@pytest.fixture()
def two_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def test_reference_runs_on_one_thread_and_restores_the_count(two_threads):
    model = _Probe().eval()
    x = np.random.default_rng(0).standard_normal((70, 6)).astype(np.float32)
    out = stages.torch_reference(model, x)
    assert {t for t, _ in model.seen} == {1}
    assert [n for _, n in model.seen] == [32, 32, 6]
    assert torch.get_num_threads() == 2
    with torch.no_grad():
        np.testing.assert_allclose(out, model.fc(torch.from_numpy(x)).numpy(), rtol=1e-6,
                                   atol=1e-7)
    assert out.dtype == np.float32 and out.shape == (70, 3)


def test_thread_count_is_restored_when_the_model_raises(two_threads):
    with pytest.raises(RuntimeError, match="boom"):
        stages.torch_reference(_Probe(fail=True), np.zeros((3, 6), np.float32))
    assert torch.get_num_threads() == 2
