"""A zoo entry's own recipe: the JSON records it, a zero_head entry's classifier starts at
zero, and only EfficientNet-B0 departs from the loop's defaults the other checkpoints were
trained with. Sample counts are data.py's $EDGESMITH_ZOO_SAMPLES (test_data.py)."""

from __future__ import annotations

import dataclasses
import json
import sys

import pytest
import torch

from .conftest import zoo_module


@pytest.fixture
def cache(tmp_path, monkeypatch, zoo_data):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv(zoo_data.SAMPLES_ENV, "36,24,12")  # a tiny run
    return tmp_path / "xdg" / "edgesmith" / "zoo"


def _catalog():
    """catalog.py as train.py imported it (a dataclass module must be in sys.modules while
    it runs, which conftest's loader does not do)."""
    return sys.modules[zoo_module("train").Entry.__module__]


def _tiny_gru(**recipe):
    return dataclasses.replace(_catalog().ZOO["kws_gru"], **recipe)


def test_the_json_records_the_entrys_recipe(cache):
    train = zoo_module("train")
    entry = _tiny_gru(warmup_epochs=0.5, label_smoothing=0.1)
    info = train.train(entry, 0, epochs=1, progress=False)
    assert info["samples"] == {"train": 36, "calib": 24, "val": 12}
    assert info["recipe"] == {"warmup_epochs": 0.5, "weight_decay": None,
                              "label_smoothing": 0.1, "batch_size": 64, "zero_head": False}
    assert json.loads((cache / "kws_gru-keywords.json").read_text())["recipe"] == \
        info["recipe"]


def _last_linear_weight(info: dict) -> torch.Tensor:
    from edgesmith.pipeline import model as pipeline_model

    model = pipeline_model.load(info["checkpoint"], arch=info["arch"]).torch_model
    return [m for m in model.modules() if isinstance(m, torch.nn.Linear)][-1].weight


def test_a_zero_head_entry_starts_its_classifier_at_zero(cache):
    train = zoo_module("train")
    info = train.train(_tiny_gru(zero_head=True), 0, epochs=0, progress=False)
    assert info["recipe"]["zero_head"] is True
    assert not _last_linear_weight(info).any()
    plain = train.train(_tiny_gru(), 0, epochs=0, progress=False)
    assert _last_linear_weight(plain).abs().sum() > 0


def test_only_efficientnet_trains_with_a_recipe_of_its_own():
    # the other checkpoints and their README figures came from the loop's defaults: an
    # entry that departs from them retrains differently and must say so here
    catalog = _catalog()
    default = catalog.Entry("x", "x.py", "shapes", (32,))
    own = {name for name, e in catalog.ZOO.items()
           if (e.recipe(), e.zero_head) != (default.recipe(), default.zero_head)}
    assert own == {"efficientnet_b0"}
