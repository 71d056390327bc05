"""A lone Erf (not the Erf of an exact GELU) in a TFLite INT8 target (issue 15).

onnx2tf writes a lone Erf out as float arithmetic with a division; its INT8 model is
written, but LiteRT cannot run the quantized DIV, so the build used to end at validation
with LiteRT's raw "Node number 23 (DIV) failed to invoke" (exit 4, no ONNX node named).
The compat report now refuses it before any work, naming the node and what to do, while
an exact GELU's Erf (TFLite's builtin GELU) and a float TFLite target keep converting.
The real converter and runtime agree (slow test)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
from torch import nn

from edgesmith.convert.compat import check
from edgesmith.convert.tflite import TFLiteTarget
from edgesmith.errors import ConversionError
from edgesmith.profiles.schema import TargetSpec
from tests.convert._formats import export, make_ctx

SHAPE = (3, 8, 8)


class _Net(nn.Module):
    def __init__(self, act: nn.Module | None) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 1)
        self.act = act

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        return self.act(y) if self.act is not None else torch.erf(y)


def _spec(precision: str) -> TargetSpec:
    return TargetSpec(format="tflite", precision=precision)


def _status(path, precision: str) -> dict[str, tuple[str, str]]:
    spec = _spec(precision)
    report = check(path, [(spec, TFLiteTarget())])
    return {r.node: (r.status[spec.name], r.hints[spec.name]) for r in report.rows
            if r.op_type == "Erf"}


@pytest.fixture(scope="module")
def lone_erf(tmp_path_factory):
    torch.manual_seed(0)
    return export(_Net(None), SHAPE, tmp_path_factory.mktemp("lone_erf"))[0]


def test_a_lone_erf_is_refused_for_tflite_int8_naming_the_node_and_the_way_out(lone_erf):
    got = _status(lone_erf, "int8")
    erf = next(n.name for n in onnx.load(str(lone_erf)).graph.node if n.op_type == "Erf")
    assert list(got) == [erf]
    status, hint = got[erf]
    assert status == "unsupported"
    assert "nn.GELU()" in hint and "fp32/fp16" in hint


def test_a_lone_erf_still_converts_for_tflite_fp32(lone_erf):
    assert {s for s, _ in _status(lone_erf, "fp32").values()} == {"lowered"}


def test_an_exact_gelus_erf_stays_convertible_for_tflite_int8(tmp_path):
    path = export(_Net(nn.GELU()), SHAPE, tmp_path)[0]
    assert {s for s, _ in _status(path, "int8").values()} == {"lowered"}


def test_the_cli_stops_a_lone_erf_before_conversion_with_the_node_named(cli, lone_erf,
                                                                         tmp_path):
    rng = np.random.default_rng(0)
    data = tmp_path / "data.npz"
    np.savez(data, x=rng.standard_normal((64, *SHAPE)).astype(np.float32),
             y=rng.integers(0, 4, 64))
    profile = tmp_path / "profile.yaml"
    profile.write_text("description: lone erf\n"
                       "device: {name: host, arch: x86_64, cores: 2, ram_mb: 4000}\n"
                       "targets:\n  - {format: tflite, precision: int8}\n")
    r = cli("convert", lone_erf, "--data", data, "--profile", profile, "--out",
            tmp_path / "out")
    erf = next(n.name for n in onnx.load(str(lone_erf)).graph.node if n.op_type == "Erf")
    assert r.code == 4, r.err
    assert erf in r.err and "nn.GELU()" in r.err and "Traceback" not in r.err
    assert not (tmp_path / "out" / "targets").exists()  # stopped before any conversion


@pytest.mark.slow
def test_the_real_int8_model_of_a_lone_erf_fails_in_its_division(lone_erf, tmp_path):
    """What the rule spares the user: onnx2tf and TensorFlow write the INT8 model, and
    LiteRT refuses to run its DIV (the message the build used to end with)."""
    x = np.random.default_rng(0).standard_normal((8, *SHAPE)).astype(np.float32)
    ctx = make_ctx(TFLiteTarget, "tflite", "int8", lone_erf, x, tmp_path)
    with pytest.raises((ConversionError, RuntimeError), match="DIV"):
        TFLiteTarget().runner(TFLiteTarget().convert(ctx))(x[:1])
