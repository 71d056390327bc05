"""Model and data references: every accepted form loads; every mistake is named."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch

from edgesmith.errors import DataError, ModelLoadError
from edgesmith.pipeline import data, model
from tests.conftest import DIGITS_ARCH, ROOT


def test_digits_split_is_deterministic_and_disjoint():
    a, b = data.digits(0), data.digits(0)
    assert np.array_equal(a.val_x, b.val_x) and np.array_equal(a.train_y, b.train_y)
    assert len(a.train_x) + len(a.calib_x) + len(a.val_x) == 1797
    assert a.spec.shape == (1, 8, 8) and a.num_classes == 10
    assert a.sha256 == b.sha256 != data.digits(1).sha256
    assert -1.0 <= a.train_x.min() and a.train_x.max() <= 1.0


def test_npz_data_loads(tmp_path):
    x = np.random.default_rng(0).normal(size=(50, 3, 4, 4)).astype(np.float32)
    np.savez(tmp_path / "d.npz", x=x, y=np.arange(50) % 5)
    s = data.load(str(tmp_path / "d.npz"))
    assert s.spec.shape == (3, 4, 4) and s.num_classes == 5
    assert len(s.train_x) + len(s.calib_x) + len(s.val_x) == 50


def test_callable_data_loads(tmp_path):
    (tmp_path / "mydata.py").write_text(
        "import numpy as np\n"
        "def get():\n    return np.zeros((20, 1, 2, 2), 'float32'), np.arange(20) % 2\n")
    s = data.load(f"{tmp_path}/mydata.py:get")
    assert s.spec.shape == (1, 2, 2)


@pytest.mark.parametrize("arrays, words", [
    ({"inputs": np.zeros((20, 4)), "y": np.zeros(20)}, "expected 'x'"),
    ({"x": np.zeros((20, 4)), "y": np.zeros(19)}, "20 samples but y has 19"),
    ({"x": np.zeros((20, 4)), "y": np.full(20, 0.5)}, "integer class labels"),
])
def test_bad_npz_is_named(tmp_path, arrays, words):
    np.savez(tmp_path / "bad.npz", **arrays)
    with pytest.raises(DataError, match=words):
        data.load(str(tmp_path / "bad.npz"))


def test_unknown_data_reference():
    with pytest.raises(DataError, match="digits"):
        data.load("imagenet")


def test_callable_model_loads():
    loaded = model.load(DIGITS_ARCH)
    assert loaded.kind == "torch" and not loaded.torch_model.training


def test_module_callable_reference(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "examples" / "digits"))
    assert model.load("model:build").torch_model is not None


def test_state_dict_needs_arch(digits_ckpt):
    with pytest.raises(ModelLoadError, match="--arch"):
        model.load(str(digits_ckpt))
    assert model.load(str(digits_ckpt), arch=DIGITS_ARCH).kind == "torch"


def test_torchscript_is_accepted(tmp_path):
    net = model.load(DIGITS_ARCH).torch_model
    path = tmp_path / "ts.pt"
    torch.jit.trace(net, torch.zeros(1, 1, 8, 8)).save(str(path))
    loaded = model.load(str(path))
    assert loaded.kind == "torchscript"
    assert loaded.torch_model(torch.zeros(2, 1, 8, 8)).shape == (2, 10)


class Evil:
    def __reduce__(self):
        return (print, ("pwned",))


def test_pickle_with_code_is_refused_without_trust_pickle(tmp_path):
    path = tmp_path / "evil.pt"
    torch.save({"x": Evil()}, path, pickle_module=pickle)
    with pytest.raises(ModelLoadError, match="--trust-pickle"):
        model.load(str(path), arch=DIGITS_ARCH)


def test_whole_module_pickle_loads_only_with_trust_pickle(tmp_path):
    path = tmp_path / "whole.pt"
    torch.save(model.load(DIGITS_ARCH).torch_model, path)
    with pytest.raises(ModelLoadError, match="refused to unpickle"):
        model.load(str(path))


def test_wrong_state_dict_names_the_mismatch(tmp_path):
    path = tmp_path / "other.pt"
    torch.save({"weight": torch.zeros(3)}, path)
    with pytest.raises(ModelLoadError, match="does not fit"):
        model.load(str(path), arch=DIGITS_ARCH)


def test_missing_model_file():
    with pytest.raises(ModelLoadError, match="does not exist"):
        model.load("nowhere/model.pt")


def test_file_without_the_callable_lists_close_names():
    with pytest.raises(ModelLoadError, match="did you mean build"):
        model.load(f"{ROOT}/examples/digits/model.py:buidl")


def test_forward_failure_on_the_input_shape_is_named():
    net = model.load(DIGITS_ARCH).torch_model
    with pytest.raises(ModelLoadError, match=r"shape \[1, 3, 8, 8\]"):
        model.check_forward(net, (1, 3, 8, 8), "m")


def test_model_path_with_spaces_and_unicode(tmp_path):
    folder = tmp_path / "my models ü"
    folder.mkdir()
    (folder / "net é.py").write_text((ROOT / "examples/digits/model.py").read_text())
    assert model.load(f"{folder}/net é.py:build").torch_model is not None
