"""Faulty data files end in exit 2 naming the file and what is wrong with it, never in a
traceback, a blame on the model or the optimiser, or a build that quietly measures nonsense.

Each case runs the real CLI (`edgesmith convert`, i.e. a build without compression) with
the demo CNN, so the whole load → reference path is exercised.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edgesmith.errors import DataError
from edgesmith.pipeline import data
from tests.conftest import DIGITS_ARCH

N = 60


def _digits_like(n: int = N) -> tuple[np.ndarray, np.ndarray]:
    """Inputs the demo CNN takes, (N, 1, 8, 8) in [-1, 1], with labels 0..9."""
    x = np.random.default_rng(0).uniform(-1, 1, size=(n, 1, 8, 8)).astype(np.float32)
    return x, np.arange(n) % 10


def _convert(cli, data_ref: str | Path, out: Path, model: str = DIGITS_ARCH):
    return cli("convert", model, "--data", str(data_ref), "--target", "onnx:fp32",
               "--out", str(out))


def _assert_input_error(r, *words: str) -> None:
    assert r.code == 2, (r.code, r.out, r.err)
    assert "Traceback" not in r.err, r.err
    for w in words:
        assert w in r.err, (w, r.err)


@pytest.mark.parametrize("compressed", [False, True], ids=["savez", "savez_compressed"])
def test_truncated_npz_is_an_input_error_naming_the_file(cli, tmp_path, compressed):
    x, y = _digits_like()
    good = tmp_path / "good.npz"
    (np.savez_compressed if compressed else np.savez)(good, x=x, y=y)
    bad = tmp_path / "cut.npz"
    bad.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    r = _convert(cli, bad, tmp_path / "out")
    _assert_input_error(r, str(bad), "truncated or corrupt")
    assert not (tmp_path / "out").exists()


def test_npz_with_a_corrupted_member_is_an_input_error(cli, tmp_path):
    x, y = _digits_like()
    path = tmp_path / "flipped.npz"
    np.savez(path, x=x, y=y)
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 3] ^= 0xFF  # inside x's data: the zip's CRC no longer matches
    path.write_bytes(bytes(raw))
    r = _convert(cli, path, tmp_path / "out")
    _assert_input_error(r, str(path), "truncated or corrupt")


def test_file_that_is_not_a_zip_is_not_called_pickled_data(cli, tmp_path):
    path = tmp_path / "notes.npz"
    path.write_text("these are my notes, not arrays\n" * 10)
    r = _convert(cli, path, tmp_path / "out")
    _assert_input_error(r, str(path), "not an .npz archive")
    assert "pickled" not in r.err


@pytest.mark.parametrize("bad, word", [(np.nan, "NaN"), (np.inf, "Inf"), (-np.inf, "Inf")])
def test_non_finite_inputs_are_refused_at_load_with_the_sample_index(cli, tmp_path, bad, word):
    x, y = _digits_like()
    x[41, 0, 2, 5] = bad
    x[52, 0, 0, 0] = bad
    path = tmp_path / "nan.npz"
    np.savez(path, x=x, y=y)
    r = _convert(cli, path, tmp_path / "out")
    _assert_input_error(r, str(path), word, "sample 41")
    assert "optimiser bug" not in r.err
    assert "✗ load" in r.err  # refused while loading, before any export or conversion


def test_float64_inputs_that_overflow_float32_are_refused(tmp_path):
    x, y = _digits_like()
    x = x.astype(np.float64)
    x[7, 0, 1, 1] = 1e300  # finite in the file, Inf once cast to the float32 the model takes
    path = tmp_path / "big.npz"
    np.savez(path, x=x, y=y)
    with pytest.raises(DataError, match=r"sample 7 .*float32") as e:
        data.load(str(path))
    assert e.value.where == str(path)


def test_non_finite_inputs_from_a_callable_name_the_split(cli, tmp_path):
    """The split's name is in brackets, which the terminal must show, not read as markup."""
    (tmp_path / "ds.py").write_text(
        "import numpy as np\n"
        "def get():\n"
        "    x = np.zeros((20, 1, 8, 8), 'float32')\n"
        "    v = x.copy(); v[3, 0, 0, 0] = np.nan\n"
        "    y = np.arange(20) % 10\n"
        "    return {'train': (x, y), 'val': (v, y)}\n")
    r = _convert(cli, f"{tmp_path}/ds.py:get", tmp_path / "out")
    _assert_input_error(r, "ds.py:get[val]: x is not finite: sample 3 holds NaN")


def test_label_beyond_the_models_classes_is_refused(cli, tmp_path):
    x, y = _digits_like()
    y[[23, 11]] = [15, 12]  # the digits CNN has 10 outputs
    path = tmp_path / "labels.npz"
    np.savez(path, x=x, y=y)
    r = _convert(cli, path, tmp_path / "out")
    _assert_input_error(r, str(path), "sample 11 has label 12", "10 output classes",
                        "2 sample(s)")
    assert not (tmp_path / "out").exists()


def test_labels_within_the_models_classes_are_accepted(tmp_path):
    """Fewer classes in the data than the model outputs is fine (a subset was sampled)."""
    x, y = _digits_like()
    s = data.load(_save(tmp_path / "five.npz", x, y % 5))
    data.check_labels(s, np.zeros((len(s.val_x), 10), np.float32), "m")


def test_negative_label_names_the_sample(tmp_path):
    x, y = _digits_like()
    y[17] = -1
    with pytest.raises(DataError, match="sample 17 has label -1"):
        data.load(_save(tmp_path / "neg.npz", x, y))


def test_rank3_inputs_the_cnn_cannot_take_blame_the_data_file(cli, tmp_path):
    x, y = _digits_like()
    path = _save(tmp_path / "rank3.npz", x[:, 0], y)  # (N, 8, 8): the channel axis is missing
    r = _convert(cli, path, tmp_path / "out")
    _assert_input_error(r, path, "[8, 8]", "expected input", DIGITS_ARCH)
    assert "manifest" not in r.err
    first = r.err.split("error:", 1)[1].lstrip()
    assert first.startswith(path), first  # the data file is what the error is about


def test_rank3_inputs_of_a_sequence_model_build(cli, tmp_path):
    """Rank-3 x is legitimate for a model that takes (N, C, L): not rejected by rank."""
    (tmp_path / "seq.py").write_text(
        "import torch, torch.nn as nn\n"
        "def build():\n"
        "    torch.manual_seed(0)\n"
        "    return nn.Sequential(nn.Conv1d(4, 8, 3), nn.ReLU(), nn.AdaptiveAvgPool1d(1),\n"
        "                         nn.Flatten(), nn.Linear(8, 3))\n")
    rng = np.random.default_rng(1)
    path = _save(tmp_path / "seq.npz", rng.normal(size=(40, 4, 16)).astype(np.float32),
                 np.arange(40) % 3)
    r = _convert(cli, path, tmp_path / "out", model=f"{tmp_path}/seq.py:build")
    assert r.code == 0, (r.out, r.err)


def test_onnx_model_whose_input_the_data_does_not_fit_blames_the_data(cli, tmp_path):
    import torch

    from edgesmith.pipeline import model

    onnx_path = tmp_path / "digits.onnx"
    torch.onnx.export(model.load(DIGITS_ARCH).torch_model, (torch.zeros(1, 1, 8, 8),),
                      str(onnx_path), input_names=["input"], dynamic_axes={"input": {0: "n"}},
                      dynamo=False)
    x, y = _digits_like()
    path = _save(tmp_path / "rank3.npz", x[:, 0], y)
    r = _convert(cli, path, tmp_path / "out", model=str(onnx_path))
    _assert_input_error(r, path, "[8, 8]", "[n, 1, 8, 8]")


def _save(path: Path, x: np.ndarray, y: np.ndarray) -> str:
    np.savez(path, x=x, y=y)
    return str(path)


RGB_CNN = (
    "import torch.nn as nn\n"
    "def build():\n"
    "    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1),\n"
    "                         nn.Flatten(), nn.Linear(4, 10))\n")


def test_inspect_without_data_on_a_non_digits_model_suggests_data(cli, tmp_path):
    (tmp_path / "rgb.py").write_text(RGB_CNN)
    r = cli("inspect", f"{tmp_path}/rgb.py:build")
    _assert_input_error(r, "--data", "[1, 1, 8, 8]")
    fix = r.err.split("fix:", 1)[1]
    assert "--data" in fix and "manifest" not in r.err


def test_inspect_with_data_takes_the_shape_from_it(cli, tmp_path):
    (tmp_path / "rgb.py").write_text(RGB_CNN)
    x = np.random.default_rng(2).normal(size=(20, 3, 16, 16)).astype(np.float32)
    path = _save(tmp_path / "rgb.npz", x, np.arange(20) % 10)
    r = cli("inspect", f"{tmp_path}/rgb.py:build", "--data", path, "--json")
    assert r.code == 0, r.err
    assert '"Conv"' in r.out


def test_inspect_with_data_the_model_cannot_take_blames_the_data(cli, tmp_path):
    x, y = _digits_like()
    path = _save(tmp_path / "rank3.npz", x[:, 0], y)
    r = cli("inspect", DIGITS_ARCH, "--data", path)
    _assert_input_error(r, path, "[8, 8]")


def test_inspect_onnx_without_data_reads_the_shape_from_the_graph(cli, tmp_path):
    import torch

    exec(compile(RGB_CNN, "rgb", "exec"), ns := {})
    onnx_path = tmp_path / "rgb.onnx"
    torch.onnx.export(ns["build"]().eval(), (torch.zeros(1, 3, 16, 16),), str(onnx_path),
                      input_names=["image"], dynamic_axes={"image": {0: "batch"}}, dynamo=False)
    r = cli("inspect", str(onnx_path), "--json")
    assert r.code == 0, r.err
    assert '"Conv"' in r.out


def test_inspect_onnx_with_a_symbolic_size_without_data_suggests_data(cli, tmp_path):
    import torch

    exec(compile(RGB_CNN, "rgb", "exec"), ns := {})
    onnx_path = tmp_path / "rgb.onnx"
    torch.onnx.export(ns["build"]().eval(), (torch.zeros(1, 3, 16, 16),), str(onnx_path),
                      input_names=["image"], dynamo=False,
                      dynamic_axes={"image": {0: "batch", 2: "height", 3: "width"}})
    r = cli("inspect", str(onnx_path))
    _assert_input_error(r, str(onnx_path), "height")
    assert "--data" in r.err.split("fix:", 1)[1]


def test_a_callable_named_like_an_emoji_code_is_printed_as_written(cli, tmp_path):
    """``ds.py:m: ...`` holds ``:m:``, which rich turns into an emoji unless told not to:
    the terminal must show the reference the user typed."""
    (tmp_path / "ds.py").write_text("def m():\n    return 5\n")
    r = _convert(cli, f"{tmp_path}/ds.py:m", tmp_path / "out")
    _assert_input_error(r, f"{tmp_path}/ds.py:m: returned int")
