"""`edgesmith build/convert` against the profile's declared runtimes (issue 20), end to end
through the CLI: the environments are real (pip), the checks run in them."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest

from tests.conftest import DIGITS_ARCH
from tests.convert.test_runtime_compat import ORT, ort_env, runtime_cache, xdg  # noqa: F401


def _profile(tmp_path: Path, onnxruntime: str) -> Path:
    path = tmp_path / "dev.yaml"
    path.write_text(f"""
name: dev
device: {{name: dev, arch: aarch64, ram_mb: 1024}}
targets:
  - {{format: onnx, precision: fp32}}
runtimes:
  onnxruntime: "{onnxruntime}"
""")
    return path


def test_runtime_that_cannot_be_installed_stops_the_build_with_exit_2(
        cli, tmp_path, xdg):  # noqa: F811
    out = tmp_path / "out"
    r = cli("convert", DIGITS_ARCH, "--profile", _profile(tmp_path, "onnxruntime==0.0.1"),
            "--out", out)
    assert r.code == 2, r.out + r.err
    text = " ".join((r.out + r.err).split())
    assert "onnxruntime==0.0.1" in text and "No matching distribution" in text
    assert "Traceback" not in r.out + r.err
    assert not out.exists()  # stopped before the build wrote anything


@pytest.mark.slow
def test_onnx_at_an_opset_newer_than_the_release_is_converted_down_and_verified(
        cli, tmp_path, digits_ckpt, ort_env, xdg):  # noqa: F811
    out = tmp_path / "out"
    r = cli("convert", digits_ckpt, "--arch", DIGITS_ARCH, "--opset", "20", "--profile",
            _profile(tmp_path, ORT), "--out", out, "--verify-runtimes")
    assert r.code == 0, r.out + r.err
    manifest = json.loads((out / "manifest.json").read_text())
    check = manifest["targets"][0]["runtime_check"]
    assert check["status"] == "ok" and check["runtime"] == ORT
    assert "opset converted down to 19" in check["retried"]
    assert check["dynamic"]["status"] == "ok" and check["dynamic"]["samples"] > 0
    model = onnx.load(str(out / manifest["targets"][0]["path"]))
    assert max(o.version for o in model.opset_import if o.domain in ("", "ai.onnx")) == 19
    assert "## Device runtimes" in (out / "report.md").read_text()


@pytest.mark.slow
def test_static_check_alone_names_nothing_when_the_artifact_fits(
        cli, tmp_path, digits_ckpt, ort_env, xdg):  # noqa: F811
    out = tmp_path / "out"
    r = cli("convert", digits_ckpt, "--arch", DIGITS_ARCH, "--opset", "17", "--profile",
            _profile(tmp_path, ORT), "--out", out)
    assert r.code == 0, r.out + r.err
    check = json.loads((out / "manifest.json").read_text())["targets"][0]["runtime_check"]
    assert check["status"] == "ok" and check["static"]["status"] == "ok"
    assert check["dynamic"] is None and "retried" not in check


def _ios_profile(tmp_path: Path, ios: int) -> Path:
    """The iphone-15 profile's two Core ML targets, declared for an older iOS."""
    path = tmp_path / "phone.yaml"
    path.write_text(f"""
name: phone
device: {{name: phone, arch: arm64-apple, ram_mb: 6144, accelerator: ane, os: ios}}
targets:
  - {{format: coreml, precision: fp16}}
  - {{format: coreml, precision: int8}}
runtimes:
  coreml: {{ios: {ios}}}
""")
    return path


@pytest.mark.slow
def test_coreml_above_the_declared_ios_is_converted_again_for_it_or_refused_naming_the_spec(
        cli, tmp_path, digits_ckpt):
    """Converted by default for iOS16 (spec 7), which iOS15 (spec 6) cannot load: the fp16
    program converts again with minimum_deployment_target iOS15 and ships at spec 6; the
    weight-only int8 one cannot (its constexpr dequantize ops need iOS16) and the target
    fails with the spec version, iOS15's maximum and the fix."""
    out = tmp_path / "out"
    r = cli("convert", digits_ckpt, "--arch", DIGITS_ARCH, "--profile",
            _ios_profile(tmp_path, 15), "--out", out)
    assert r.code == 4, r.out + r.err
    text = " ".join((r.out + r.err).split())
    assert "coreml-int8 on iOS15: op missing" in text
    assert "static: Core ML spec version 7 (specificationVersion): max 6" in text
    assert "minimum_deployment_target" in text and "Traceback" not in text
    targets = {t["name"]: t for t in json.loads((out / "manifest.json").read_text())["targets"]}
    fp16, int8 = targets["coreml-fp16"], targets["coreml-int8"]
    assert fp16["status"] == "ok" and fp16["runtime_check"]["status"] == "ok"
    assert "deployment_target iOS15" in fp16["runtime_check"]["retried"]
    assert fp16["meta"]["deployment_target"] == "iOS15"
    assert fp16["meta"]["spec"]["spec_version"] == 6
    assert int8["status"] == "failed" and int8["runtime_check"]["status"] == "op missing"
    assert "still Core ML spec version 7" in int8["runtime_check"]["retried"]
    assert int8["meta"]["spec"]["spec_version"] == 7  # the first conversion, put back
    assert not list((out / "targets").glob(".*before-retry"))
