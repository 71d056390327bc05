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
