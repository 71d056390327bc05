"""examples/zoo/train.py: one tiny run writes a loadable checkpoint and its JSON into the
cache dir, keeps it on the next run, and refuses a size the model has no callable for."""

from __future__ import annotations

import json

import pytest

from .conftest import zoo_module


@pytest.fixture
def tiny_cache(tmp_path, monkeypatch, zoo_data):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv(zoo_data.SAMPLES_ENV, "48,16,24")
    return tmp_path / "xdg" / "edgesmith" / "zoo"


def test_one_epoch_writes_a_checkpoint_the_build_can_load(tiny_cache, capsys):
    from edgesmith.pipeline import model as pipeline_model

    train = zoo_module("train")
    assert train.main(["mobilenetv2", "--size", "32", "--epochs", "1"]) == 0
    info = json.loads((tiny_cache / "mobilenetv2-digits32.json").read_text())
    assert info["samples"] == {"train": 48, "calib": 16, "val": 24}
    assert info["epochs"] == 1 and info["input_shape"] == [3, 32, 32]
    assert 0.0 <= info["val_accuracy"] <= 1.0 and info["chance"] == 0.1
    assert info["arch"].endswith("examples/zoo/mobilenetv2.py:build")
    assert info["data"].endswith("examples/zoo/data.py:digits32")
    loaded = pipeline_model.load(str(tiny_cache / "mobilenetv2-digits32.pt"), arch=info["arch"])
    assert loaded.kind == "torch"
    assert "val top-1" in capsys.readouterr().out


def test_an_existing_checkpoint_is_kept_unless_forced(tiny_cache, capsys):
    train = zoo_module("train")
    assert train.main(["kws_gru", "--epochs", "1"]) == 0
    ckpt = tiny_cache / "kws_gru-keywords.pt"
    before = ckpt.stat().st_mtime_ns
    assert train.main(["kws_gru", "--epochs", "1"]) == 0
    assert ckpt.stat().st_mtime_ns == before
    assert "kept" in capsys.readouterr().out
    assert train.main(["kws_gru", "--epochs", "1", "--force"]) == 0
    assert ckpt.stat().st_mtime_ns != before


def test_a_size_without_a_callable_is_exit_2_naming_the_sizes(tiny_cache, capsys):
    train = zoo_module("train")
    assert train.main(["vit_small", "--size", "64"]) == 2
    err = capsys.readouterr().err
    assert "vit_small has no input size 64" in err and "--size 32 or 96" in err
    assert not tiny_cache.exists()
