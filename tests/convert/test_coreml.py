"""Core ML target: ML Program conversion, int8 modes, spec check; no prediction off macOS."""

from __future__ import annotations

import platform

import numpy as np
import pytest
import torch
from pydantic import ValidationError
from torch import nn

from edgesmith.convert.coreml import CoreMLTarget
from edgesmith.errors import ConversionError
from tests.convert._formats import digits_bundle, export, make_ctx

pytestmark = pytest.mark.slow  # coremltools import + conversions: ~10 s together


@pytest.fixture(scope="module")
def bundle(digits_ckpt, tmp_path_factory):
    folder = tmp_path_factory.mktemp("coreml")
    return digits_bundle(digits_ckpt, folder), folder


def _ctx(bundle, precision, **kw):
    b, folder = bundle
    return make_ctx(CoreMLTarget, "coreml", precision, b.onnx, b.calib_x, folder,
                    spec=b.spec, torchscript=b.torchscript, **kw)


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_float_mlprogram_has_the_model_io_and_is_not_run_off_macos(bundle, precision):
    art = CoreMLTarget().convert(_ctx(bundle, precision))
    assert art.path.name == "model.mlpackage" and art.path.is_dir()
    spec = art.meta["spec"]
    assert spec["ok"] and spec["inputs"] == [
        {"name": "input", "shape": [1, 1, 8, 8], "dtype": "FLOAT32"}]
    assert spec["outputs"][0]["name"] == "output"
    assert spec["ops"]["conv"] == 6
    if platform.system() != "Darwin":
        assert CoreMLTarget().runner(art) is None
        assert "macOS" in CoreMLTarget.not_runnable_reason


def test_int8_weight_only_quantizes_every_conv_and_shrinks(bundle):
    fp32 = CoreMLTarget().convert(_ctx(bundle, "fp32"))
    int8 = CoreMLTarget().convert(_ctx(bundle, "int8"))
    assert int8.meta["spec"]["ops"]["constexpr_affine_dequantize"] == 7  # 6 conv + linear
    assert int8.size_bytes <= 0.35 * fp32.size_bytes
    assert CoreMLTarget().device_bench_spec(int8)["compute_units"] == "ALL"


def test_w8a8_quantizes_activations_from_the_torch_module(bundle):
    b, _ = bundle
    ctx = _ctx(bundle, "int8", int8_mode="w8a8", compute_units="ane")
    ctx.torch_model = b.module
    art = CoreMLTarget().convert(ctx)
    ops = art.meta["spec"]["ops"]
    assert ops["quantize"] > 0 and ops["dequantize"] > 0
    assert art.meta["deployment_target"] == "iOS17"
    assert CoreMLTarget().device_bench_spec(art)["compute_units"] == "CPU_AND_NE"
    assert "W8A8 torch-side parity" in ctx.log_path.read_text()


def test_w8a8_without_the_module_says_what_it_needs(bundle):
    with pytest.raises(ConversionError, match="nn.Module"):
        CoreMLTarget().convert(_ctx(bundle, "int8", int8_mode="w8a8"))


def test_w8a8_with_a_pre_ios17_target_is_rejected_as_options():
    with pytest.raises(ValidationError, match="iOS17"):
        CoreMLTarget.Options(int8_mode="w8a8", deployment_target="iOS16")


def test_missing_torchscript_is_a_conversion_error(bundle):
    b, folder = bundle
    ctx = make_ctx(CoreMLTarget, "coreml", "fp32", b.onnx, b.calib_x, folder, spec=b.spec)
    with pytest.raises(ConversionError, match="TorchScript"):
        CoreMLTarget().convert(ctx)


def test_converter_crash_is_a_conversion_error_naming_format_and_stage(tmp_path):
    class Bicubic(nn.Module):
        def forward(self, x):
            return nn.functional.interpolate(x, scale_factor=2, mode="bicubic")

    onnx_path, ts = export(Bicubic(), (1, 4, 4), tmp_path)
    ctx = make_ctx(CoreMLTarget, "coreml", "fp32", onnx_path,
                   np.zeros((2, 1, 4, 4), np.float32), tmp_path, torchscript=ts)
    with pytest.raises(ConversionError) as e:
        CoreMLTarget().convert(ctx)
    assert "coreml conversion (coremltools.convert)" in str(e.value)
    assert "upsample_bicubic2d" in ctx.log_path.read_text()
    assert torch.jit.load(str(ts)) is not None  # the input itself was fine
