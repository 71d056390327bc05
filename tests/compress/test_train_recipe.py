"""fit's recipe knobs (warm-up, label smoothing, weight decay): each changes training as
named, their defaults keep the loop as it was, and a bad value is a usage error."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch

from edgesmith.compress.train import fit
from edgesmith.errors import UsageError

ROOT = Path(__file__).resolve().parents[2]
ARCH = f"{ROOT}/examples/digits/model.py:build"
LR = 0.01


def _untrained() -> torch.nn.Module:
    from edgesmith.pipeline.model import load

    return load(ARCH).torch_model


def _lrs(res: dict) -> list[float]:
    return [h["lr"] for h in res["history"]]


def test_a_warm_up_of_one_epoch_reaches_the_full_lr_when_it_ends(splits):
    # cosine alone is halfway down (lr/2) after one epoch of two; with one epoch of warm-up
    # the decay only starts there, so the lr is the full one
    plain = fit(_untrained(), splits, epochs=2, lr=LR, patience=9)
    warm = fit(_untrained(), splits, epochs=2, lr=LR, patience=9, warmup_epochs=1)
    assert _lrs(plain)[0] == pytest.approx(LR / 2, rel=0.05)
    assert _lrs(warm)[0] == pytest.approx(LR, rel=1e-6)
    assert _lrs(warm)[1] == pytest.approx(0.0, abs=1e-9)


def test_the_first_warm_up_steps_run_at_a_hundredth_of_the_lr(splits, monkeypatch):
    steps: list[float] = []
    original = torch.optim.AdamW.step

    def spy(self, *a, **k):  # the lr each real optimizer step is taken with
        steps.append(self.param_groups[0]["lr"])
        return original(self, *a, **k)

    monkeypatch.setattr(torch.optim.AdamW, "step", spy)
    fit(_untrained(), splits, epochs=1, lr=LR, optimizer="adamw", patience=9, warmup_epochs=1)
    assert steps[0] == pytest.approx(LR / 100)
    assert steps == sorted(steps)  # the ramp only rises within the warm-up


def test_a_warm_up_longer_than_the_run_is_cut_to_it(splits):
    # uncut, the ramp would still be at a fifth of the lr when the run ends; cut, the run
    # ends its cosine decay at 0 as a run without warm-up does
    res = fit(_untrained(), splits, epochs=1, lr=LR, patience=9, warmup_epochs=5)
    assert res["epochs_run"] == 1 and _lrs(res)[0] == pytest.approx(0.0, abs=1e-9)


def test_label_smoothing_raises_the_loss_of_a_confident_model(trained, splits):
    # lr tiny: the weights barely move, so the loss is the trained model's on train
    plain = fit(copy.deepcopy(trained), splits, epochs=1, lr=1e-9, patience=9)
    smooth = fit(copy.deepcopy(trained), splits, epochs=1, lr=1e-9, patience=9,
                 label_smoothing=0.3)
    assert smooth["history"][0]["loss"] > plain["history"][0]["loss"] + 0.3


@pytest.mark.parametrize("optimizer, cls", [("adamw", torch.optim.AdamW),
                                            ("sgd", torch.optim.SGD)])
def test_weight_decay_reaches_the_optimizer_and_none_keeps_its_default(splits, monkeypatch,
                                                                        optimizer, cls):
    seen: list[float] = []
    original = cls.step

    def spy(self, *a, **k):
        seen.append(self.param_groups[0]["weight_decay"])
        return original(self, *a, **k)

    monkeypatch.setattr(cls, "step", spy)
    for wd in (0.05, None):
        fit(_untrained(), splits, epochs=1, lr=LR, optimizer=optimizer, weight_decay=wd)
    default = {"adamw": 1e-4, "sgd": 5e-4}[optimizer]
    assert set(seen) == {0.05, default}


@pytest.mark.parametrize("kw, match", [
    ({"warmup_epochs": -1}, "warm-up"),
    ({"warmup_epochs": float("nan")}, "warm-up"),
    ({"label_smoothing": 1.0}, "label smoothing"),
    ({"weight_decay": -0.1}, "weight decay"),
])
def test_a_bad_recipe_value_is_a_usage_error_naming_it(splits, kw, match):
    with pytest.raises(UsageError, match=match):
        fit(_untrained(), splits, epochs=1, lr=LR, **kw)
