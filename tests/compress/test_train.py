"""The fine-tune loop: seeded, keeps the best epoch, and runs the same under torchrun."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch import nn

from edgesmith.compress.train import (
    HOLDOUT_FRACTION,
    MIN_SELECTION_SAMPLES,
    evaluate,
    fit,
    selection_split,
)
from edgesmith.errors import UsageError

ROOT = Path(__file__).resolve().parents[2]
ARCH = f"{ROOT}/examples/digits/model.py:build"


def _untrained():
    from edgesmith.pipeline.model import load

    return load(ARCH).torch_model


def test_same_seed_gives_the_same_training_history(splits):
    a = fit(_untrained(), splits, epochs=2, lr=0.05, seed=3)
    b = fit(_untrained(), splits, epochs=2, lr=0.05, seed=3)
    assert [h["loss"] for h in a["history"]] == [h["loss"] for h in b["history"]]


def test_fit_learns_and_restores_the_best_epoch(splits):
    model = _untrained()
    events = []
    res = fit(model, splits, epochs=4, lr=0.05, optimizer="adamw", batch_size=64, seed=0,
              patience=5, progress=events.append)
    assert res["best_selection_accuracy"] > 0.9
    assert res["selection"] == {"split": "calib", "samples": len(splits.calib_y),
                                "train_samples": len(splits.train_y)}
    assert evaluate(model, splits.calib_x, splits.calib_y) == \
        pytest.approx(res["best_selection_accuracy"])
    assert [e["epoch"] for e in events] == list(range(1, res["epochs_run"] + 1))
    assert res["best_selection_accuracy"] == max(h["selection_accuracy"] for h in res["history"])


def _disagreeing(splits) -> SimpleNamespace:
    """The digits splits with every validation label shifted by one class: the better a
    model gets, the worse it scores on val, so a fit that picked its epoch on val would
    hand back the untrained weights (epoch 0) while the calib split wants the last one."""
    return SimpleNamespace(train_x=splits.train_x, train_y=splits.train_y,
                           calib_x=splits.calib_x, calib_y=splits.calib_y,
                           val_x=splits.val_x, val_y=(splits.val_y + 1) % 10)


def test_fit_restores_the_epoch_best_on_the_selection_split_never_on_val(splits):
    model = _untrained()
    bent = _disagreeing(splits)
    res = fit(model, bent, epochs=3, lr=0.05, optimizer="adamw", seed=0, patience=3)
    assert res["best_epoch"] >= 1
    assert evaluate(model, splits.calib_x, splits.calib_y) > 0.8
    assert evaluate(model, bent.val_x, bent.val_y) < 0.1  # val disagreed and was not asked


def test_fit_holds_out_a_slice_of_train_when_calib_is_the_training_data(splits):
    same = SimpleNamespace(train_x=splits.train_x, train_y=splits.train_y,
                           calib_x=splits.train_x, calib_y=splits.train_y,
                           val_x=splits.val_x, val_y=splits.val_y)
    res = fit(_untrained(), same, epochs=0, lr=0.05)
    n = len(splits.train_y)
    held = max(MIN_SELECTION_SAMPLES, round(n * HOLDOUT_FRACTION))
    assert res["selection"] == {"split": "train holdout", "samples": held,
                                "train_samples": n - held}


def test_a_calib_split_too_small_to_select_on_gives_way_to_a_train_holdout(splits):
    tiny = SimpleNamespace(train_x=splits.train_x, train_y=splits.train_y,
                           calib_x=splits.calib_x[:MIN_SELECTION_SAMPLES - 1],
                           calib_y=splits.calib_y[:MIN_SELECTION_SAMPLES - 1])
    sel = selection_split(tiny)
    assert sel.source == "train holdout"
    # disjoint: no training sample is also a selection sample
    train_rows = {r.tobytes() for r in sel.train_x}
    assert not any(r.tobytes() in train_rows for r in sel.x)
    assert len(sel.x) + len(sel.train_x) == len(splits.train_x)


def test_fine_tuning_never_returns_a_worse_model(trained, splits):
    before = evaluate(trained, splits.val_x, splits.val_y)
    res = fit(trained, splits, epochs=1, lr=5.0, seed=0)  # absurd lr: training diverges
    assert evaluate(trained, splits.val_x, splits.val_y) == pytest.approx(before)
    assert res["best_epoch"] == 0


def test_early_stop_after_patience_epochs_without_gain(trained, splits):
    res = fit(trained, splits, epochs=10, lr=1e-6, seed=0, patience=1)
    assert res["epochs_run"] < 10


def test_evaluate_is_top1_in_unit_range(trained, splits):
    acc = evaluate(trained, splits.val_x, splits.val_y)
    assert 0.9 < acc <= 1.0
    assert evaluate(trained, splits.val_x, (splits.val_y + 1) % 10) < 0.1


def test_unknown_optimizer_is_a_usage_error(trained, splits):
    with pytest.raises(UsageError, match="optimizer"):
        fit(trained, splits, epochs=1, lr=0.01, optimizer="lbfgs")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _torchrun(nproc: int, out: Path, *args: str, timeout: float = 180) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}",
           "--master-addr=127.0.0.1", f"--master-port={_free_port()}",
           "-m", "edgesmith.pipeline.train", "--model", ARCH, "--out", str(out), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text())


@pytest.mark.slow
def test_two_process_ddp_matches_single_process(tmp_path, splits):
    from edgesmith.pipeline.train import main

    args = ["--data", "digits", "--epochs", "4", "--lr", "0.05", "--seed", "0"]
    assert main([*args, "--model", ARCH, "--out", str(tmp_path / "one.json")]) == 0
    one = json.loads((tmp_path / "one.json").read_text())
    two = _torchrun(2, tmp_path / "two.json", *args, "--save", str(tmp_path / "best.pt"))
    assert two["world_size"] == 2 and one["world_size"] == 1
    assert two["best_selection_accuracy"] > 0.9
    assert abs(two["best_selection_accuracy"] - one["best_selection_accuracy"]) <= 0.03
    assert (tmp_path / "best.pt").is_file()  # rank 0 checkpointed


@pytest.mark.slow
def test_ddp_with_a_world_size_that_does_not_divide_the_data_finishes(tmp_path, splits):
    n = 1001  # 701 training samples: odd, so 2 ranks cannot split them evenly
    x = np.concatenate([splits.train_x, splits.val_x])[:n]
    y = np.concatenate([splits.train_y, splits.val_y])[:n]
    np.savez(tmp_path / "odd.npz", x=x, y=y)
    res = _torchrun(2, tmp_path / "odd.json", "--data", str(tmp_path / "odd.npz"),
                    "--epochs", "2", "--batch-size", "50", timeout=120)
    assert res["train_samples"] % 2 == 1
    assert res["epochs_run"] == 2 and res["world_size"] == 2


def _depthwise_net() -> nn.Module:
    return nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(),
                         nn.Conv2d(8, 8, 3, padding=1, groups=8), nn.ReLU(),
                         nn.Conv2d(8, 8, 3, padding=1), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(8, 10))


def test_a_depthwise_model_trains_channels_last_and_comes_back_contiguous(splits):
    """Channels-last is a training-time speed-up only: the caller gets back the default
    layout it traces, exports and prunes (an export of a channels-last model still works,
    but torch-pruning and TorchScript users expect contiguous weights)."""
    model = _depthwise_net()
    seen = []
    model[2].register_forward_pre_hook(
        lambda _m, args: seen.append(args[0].is_contiguous(memory_format=torch.channels_last)))
    small = SimpleNamespace(train_x=splits.train_x[:256], train_y=splits.train_y[:256],
                            calib_x=splits.calib_x, calib_y=splits.calib_y)
    fit(model, small, epochs=1, lr=0.01, seed=0)
    assert any(seen)  # the training batches ran channels-last
    assert all(p.is_contiguous() for p in model.parameters())
