"""Channel pruning: a real smaller module, same output shape, fewer MACs, smaller ONNX."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from edgesmith.compress.prune import count, prune
from edgesmith.errors import ModelLoadError, UsageError
from edgesmith.profiles.schema import Prune

X = torch.zeros(1, 1, 8, 8)


def test_pruned_model_is_smaller_and_keeps_its_output_shape(trained):
    res = prune(trained, X, Prune(enabled=True, ratio=0.3, round_to=8))
    r = res.report
    assert res.model(torch.zeros(5, 1, 8, 8)).shape == (5, 10)
    assert r["macs_after"] < r["macs_before"] and r["params_after"] < r["params_before"]
    assert r["onnx_bytes_after"] < r["onnx_bytes_before"]
    assert r["state_dict_bytes_after"] < r["state_dict_bytes_before"]
    assert count(res.model, X) == (r["macs_after"], r["params_after"])
    assert r["channels"] and all(after % 8 == 0 for _, after in r["channels"].values())
    assert res.model.classifier.out_features == 10  # the classifier is ignored by default


def test_macs_target_is_reached_by_steps(trained):
    r = prune(trained, X, Prune(enabled=True, macs_reduction=0.5), measure_onnx=False).report
    assert r["macs_reduction"] >= 0.5
    assert r["steps"] > 1


@pytest.mark.parametrize("importance", ["magnitude", "l2", "bn_scale", "taylor"])
def test_each_importance_prunes(trained, splits, importance):
    res = prune(trained, X, Prune(enabled=True, ratio=0.25, importance=importance,
                                  global_pruning=importance == "l2"),
                data=(splits.train_x, splits.train_y), measure_onnx=False)
    assert res.report["macs_after"] < res.report["macs_before"]


@pytest.mark.parametrize("ratio", [0.0, 1.0, 1.5, -0.2])
def test_ratio_outside_the_open_unit_interval_is_refused(trained, ratio):
    settings = Prune.model_construct(enabled=True, ratio=ratio, macs_reduction=None,
                                     importance="l2", round_to=None, ignored_layers=None,
                                     global_pruning=False)
    with pytest.raises(UsageError, match="between 0 and 1"):
        prune(trained, X, settings)


def test_profile_schema_also_refuses_a_bad_ratio():
    with pytest.raises(ValueError):
        Prune(enabled=True, ratio=1.2)


def test_unknown_ignored_layer_lists_close_matches(trained):
    with pytest.raises(UsageError) as e:
        prune(trained, X, Prune(enabled=True, ratio=0.3, ignored_layers=["clasifier"]))
    assert "clasifier" in e.value.what and "classifier" in (e.value.fix or "")


def test_pruning_without_a_target_is_a_usage_error(trained):
    with pytest.raises(UsageError, match="neither ratio nor macs_reduction"):
        prune(trained, X, Prune(enabled=True))


class LeavesAutograd(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(1, 8, 3)
        self.c2 = nn.Conv2d(8, 8, 3)
        self.fc = nn.Linear(8 * 4 * 4, 10)

    def forward(self, x):
        x = torch.from_numpy(self.c1(x).detach().numpy())  # the trace breaks here
        return self.fc(self.c2(x).flatten(1))


def test_model_torch_pruning_cannot_trace_is_refused_naming_the_module():
    with pytest.raises(ModelLoadError) as e:
        prune(LeavesAutograd(), X, Prune(enabled=True, ratio=0.5))
    assert "'c2'" in e.value.what and "LeavesAutograd.c2" in e.value.where


def test_torchscript_model_is_refused(trained):
    scripted = torch.jit.trace(trained, X)
    with pytest.raises(ModelLoadError, match="TorchScript"):
        prune(scripted, X, Prune(enabled=True, ratio=0.3))
