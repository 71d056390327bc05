"""`edgesmith build` end to end on the digits demo (ONNX targets), and its failure paths."""

from __future__ import annotations

import json

import numpy as np
import pytest

from edgesmith.artifact import sha256_path
from tests.conftest import DIGITS_ARCH, ROOT
from tests.pipeline.test_skip_and_settings import CUMSUM

ONLY = ("-t", "onnx:fp32")  # bad-input tests need no other format


@pytest.fixture(scope="module")
def built(digits_ckpt, tmp_path_factory):
    """One real build shared by the read-only assertions below."""
    from edgesmith.pipeline import build

    out = tmp_path_factory.mktemp("b") / "demo"
    manifest = build.run(build.BuildRequest(
        model=str(digits_ckpt), arch=DIGITS_ARCH, data="digits", profile="host", out=out,
        targets=["onnx"])).manifest
    return out, manifest


def test_onnx_fp32_matches_torch(built):
    _, manifest = built
    t = manifest["targets"][0]
    assert t["name"] == "onnx-fp32" and t["status"] == "ok"
    assert abs(t["accuracy"] - t["reference_accuracy"]) <= 0.001  # within 0.1 pt
    assert t["parity"]["max_abs_err"] < 1e-4 and t["parity"]["cosine"] > 0.99999


def test_onnx_int8_is_small_and_close(built):
    t = next(t for t in built[1]["targets"] if t["name"] == "onnx-int8")
    assert t["status"] == "ok" and t["accuracy_drop"] <= 1.0
    assert t["size_bytes"] < 0.35 * built[1]["targets"][0]["size_bytes"]


def test_manifest_records_what_reproduces_the_build(built):
    out, manifest = built
    on_disk = json.loads((out / "manifest.json").read_text())
    assert on_disk["targets"] == json.loads(json.dumps(manifest["targets"]))
    assert manifest["input"]["shape"] == [1, 8, 8]
    assert "formula" in manifest["input"]["normalization"]
    assert set(manifest["inputs"]["sha256"]) >= {"data", "profile", "model", "arch"}
    assert manifest["tools"]["torch"] and manifest["tools"]["onnxruntime"]
    assert manifest["profile"]["name"] == "host"
    opt = manifest["stages"]["optimize"]
    assert opt["parity_max_abs_err"] <= opt["parity_tolerance"]
    assert opt["parity_tolerance"] == max(1e-5, opt["parity_rtol"] * opt["parity_output_scale"])
    for t in manifest["targets"]:
        assert sha256_path(out / t["sha256_of"]) == t["sha256"]


def test_bench_data_is_what_the_reference_saw(built):
    out, manifest = built
    x = np.load(out / manifest["bench_data"]["input"])
    ref = np.load(out / manifest["bench_data"]["reference"])
    assert x.shape == (16, 1, 8, 8) and ref.shape == (16, 10)


def test_report_and_compat_written(built):
    out, _ = built
    md = (out / "report.md").read_text()
    assert "onnx-fp32" in md and "| target |" in md
    assert (out / "report.html").read_text().startswith("<!doctype html>")
    compat = json.loads((out / "compat.json").read_text())
    assert compat["counts"]["onnx-fp32"]["unsupported"] == 0
    assert not list(out.parent.glob(".demo.tmp-*")), "staging folder left behind"


def test_cli_build_json_summary(cli, digits_ckpt, tmp_path):
    r = cli("build", digits_ckpt, "--arch", DIGITS_ARCH, "--out", tmp_path / "o",
            "-t", "onnx:fp32", "--json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert [t["name"] for t in doc["targets"]] == ["onnx-fp32"]
    assert doc["targets"][0]["status"] == "ok"


def test_onnx_model_input_builds(cli, built, tmp_path):
    out, _ = built
    r = cli("convert", out / "model.onnx", "--out", tmp_path / "o", *ONLY)
    assert r.code == 0, r.err
    m = json.loads((tmp_path / "o" / "manifest.json").read_text())
    assert m["reference"]["source"] == "onnxruntime"


# -- bad input: exit 2, one clear message, nothing half-written --------------------------

def _no_output(path):
    """Nothing published and no staging left; the lock file may stay (flock needs it)."""
    leftovers = [p for p in path.parent.glob(f".{path.name}.*") if p.suffix != ".lock"]
    return not path.exists() and not leftovers


def test_missing_model_file(cli, tmp_path):
    r = cli("build", tmp_path / "none.pt", "--out", tmp_path / "o", *ONLY)
    assert r.code == 2 and "does not exist" in r.err and "Traceback" not in r.err
    assert _no_output(tmp_path / "o")


def test_file_without_callable(cli, tmp_path):
    r = cli("build", f"{ROOT}/examples/digits/model.py:nope", "--out", tmp_path / "o", *ONLY)
    assert r.code == 2 and "has no 'nope'" in r.err
    assert _no_output(tmp_path / "o")


def test_forward_fails_on_recorded_shape(cli, tmp_path):
    x = np.zeros((40, 3, 8, 8), np.float32)
    np.savez(tmp_path / "rgb.npz", x=x, y=np.arange(40) % 10)
    r = cli("build", DIGITS_ARCH, "--data", tmp_path / "rgb.npz", "--out", tmp_path / "o", *ONLY)
    assert r.code == 2 and "forward pass" in r.err and "[2, 3, 8, 8]" in r.err
    assert _no_output(tmp_path / "o")


def test_data_with_wrong_keys(cli, tmp_path):
    np.savez(tmp_path / "d.npz", images=np.zeros((40, 1, 8, 8)), labels=np.zeros(40))
    r = cli("build", DIGITS_ARCH, "--data", tmp_path / "d.npz", "--out", tmp_path / "o", *ONLY)
    assert r.code == 2 and "expected 'x'" in r.err
    assert _no_output(tmp_path / "o")


def test_data_with_mismatched_lengths(cli, tmp_path):
    np.savez(tmp_path / "d.npz", x=np.zeros((40, 1, 8, 8)), y=np.zeros(39, int))
    r = cli("build", DIGITS_ARCH, "--data", tmp_path / "d.npz", "--out", tmp_path / "o", *ONLY)
    assert r.code == 2 and "40 samples but y has 39" in r.err


def test_profile_error(cli, tmp_path):
    (tmp_path / "p.yaml").write_text("device: {name: x, arch: x86_64}\ntargets: []\n")
    r = cli("build", DIGITS_ARCH, "--profile", tmp_path / "p.yaml", "--out", tmp_path / "o", *ONLY)
    assert r.code == 2 and f"{tmp_path / 'p.yaml'}:1" in r.err
    assert _no_output(tmp_path / "o")


def test_output_dir_is_a_file(cli, tmp_path):
    (tmp_path / "o").write_text("precious")
    r = cli("build", DIGITS_ARCH, "--out", tmp_path / "o", *ONLY)
    assert r.code == 2 and "not a directory" in r.err
    assert (tmp_path / "o").read_text() == "precious"


def test_failed_build_leaves_previous_build_intact(cli, built, tmp_path):
    import shutil

    out = tmp_path / "keep"
    shutil.copytree(built[0], out)
    before = sha256_path(out)
    r = cli("build", f"{ROOT}/examples/digits/model.py:nope", "--out", out, "-t", "onnx")
    assert r.code == 2
    assert sha256_path(out) == before


def test_unknown_target_filter(cli, tmp_path):
    r = cli("build", DIGITS_ARCH, "--out", tmp_path / "o", "-t", "tensorrt")
    assert r.code == 2 and "FORMAT[:PRECISION]" in r.err


@pytest.mark.slow
def test_build_runs_compression_first_when_asked(cli, digits_ckpt, tmp_path):
    r = cli("build", digits_ckpt, "--arch", DIGITS_ARCH, "--out", tmp_path / "o",
            "--prune-ratio", "0.3", "-t", "onnx:int8", "--json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    prune = doc["compress"]["prune"]
    assert prune["macs_after"] < prune["macs_before"]
    m = json.loads((tmp_path / "o" / "manifest.json").read_text())
    assert m["reference"]["parity_against"] == "torch (compressed)"
    assert m["reference"]["compressed_accuracy"] > 0.9
    t = m["targets"][0]
    # the drop is measured against the original FP32 model, as the budget defines it
    assert t["reference_accuracy"] == m["reference"]["accuracy"]
    assert abs(t["accuracy_drop"] - 100 * (m["reference"]["accuracy"] - t["accuracy"])) < 1e-3
    assert (tmp_path / "o" / "compress" / "model.onnx").exists()


def test_unsupported_op_stops_the_build_before_compression(cli, tmp_path):
    (tmp_path / "cumsum.py").write_text(CUMSUM)  # CumSum: unsupported by tflite
    r = cli("build", f"{tmp_path}/cumsum.py:build", "--out", tmp_path / "o",
            "--prune-ratio", "0.3", "-t", "tflite:fp32")
    assert r.code == 4, r.err
    assert "(CumSum) -> tflite-fp32" in r.err
    assert "finetune" not in r.err and "prune" not in r.err  # nothing was trained
    assert _no_output(tmp_path / "o")
