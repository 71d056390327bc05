"""TFLite INT8 of a conv+GRU net (issue 15, item 4b).

It failed twice over: onnx2tf looked for an ``onnxsim`` executable that is not installed
(a FileNotFoundError in the log), then TensorFlow's INT8 calibrator segfaulted on the
GRU's WHILE loop (tensorflow#62281, #75140), with calibration samples in the ONNX layout
(N, C, L) fed to a TFLite input that is (1, L, C). Now: the child's PATH starts with this
interpreter's bin folder and a missing onnxsim is skipped with the package named; RNNs
are unrolled and calibrated channels-last; and a converter that still crashes is a
ConversionError naming the signal and the step, never a crash of the build.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from edgesmith.convert import _onnx2tf
from edgesmith.convert.export import export_onnx
from edgesmith.convert.tflite import TFLiteTarget
from edgesmith.errors import ConversionError
from tests.convert._formats import make_ctx, onnx_run

pytestmark = pytest.mark.slow  # onnx2tf with INT8 calibration: ~15 s per run

SHAPE = (8, 10)  # 8 features x 10 time steps


class _ConvGRU(nn.Module):
    """Keyword-spotting shape: Conv1d front end over features, GRU over time, linear head."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Sequential(nn.Conv1d(8, 16, 3, padding=1), nn.ReLU())
        self.gru = nn.GRU(16, 16, batch_first=True)
        self.fc = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y, _ = self.gru(self.conv(x).transpose(1, 2))
        return self.fc(y[:, -1])


@pytest.fixture(scope="module")
def gru(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gru")
    onnx_path = export_onnx(_ConvGRU(), (1, *SHAPE), folder / "gru.onnx")
    x = np.random.default_rng(0).standard_normal((64, *SHAPE)).astype(np.float32)
    return onnx_path, x, folder


def test_a_conv_gru_net_converts_to_tflite_int8_and_matches_onnxruntime(gru):
    onnx_path, x, folder = gru
    ctx = make_ctx(TFLiteTarget, "tflite", "int8", onnx_path, x[:32], folder)
    art = TFLiteTarget().convert(ctx)
    assert art.meta["inputs"][0]["shape"] == [1, SHAPE[1], SHAPE[0]]  # channels-last
    assert "WHILE" not in art.meta["ops"]
    ref, got = onnx_run(onnx_path, x[32:]), TFLiteTarget().runner(art)(x[32:])
    cosine = (ref * got).sum(1) / np.linalg.norm(ref, axis=1) / np.linalg.norm(got, axis=1)
    assert cosine.min() > 0.99, cosine.min()
    assert np.abs(ref - got).max() < 0.05 * np.abs(ref).max()
    log = ctx.log_path.read_text()
    assert "No such file or directory: 'onnxsim'" not in log
    if shutil.which("onnxsim", path=_onnx2tf.child_env()["PATH"]) is None:
        assert "pip package `onnxsim`" in log


def test_a_converter_segfault_is_a_clean_failure_naming_signal_and_step(gru, tmp_path,
                                                                         monkeypatch):
    """The GRU as a WHILE loop, as onnx2tf converts it by default: TensorFlow's calibrator
    really segfaults (in the child); the target fails, this process goes on."""
    onnx_path, x, _ = gru
    monkeypatch.setattr(_onnx2tf, "UNROLL_RNN", False)
    ctx = make_ctx(TFLiteTarget, "tflite", "int8", onnx_path, x[:32], tmp_path)
    with pytest.raises(ConversionError) as e:
        TFLiteTarget().convert(ctx)
    assert "onnx2tf crashed (SIGSEGV) while INT8 calibration" in e.value.what
    assert str(ctx.log_path) in e.value.fix
    assert not (ctx.out_dir / "model.tflite").exists()


def test_the_converter_child_finds_executables_of_this_interpreter_first(monkeypatch):
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # a venv run without activating it
    path = _onnx2tf.child_env()["PATH"].split(os.pathsep)
    assert path[0] == str(Path(sys.executable).parent)
    assert path[1:] == ["/usr/bin", "/bin"]
