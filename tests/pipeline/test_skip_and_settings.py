"""--skip-unsupported (issue 15 item 7), per-stage wall times (item 8) and the fine-tune /
QAT settings on the command line (item 5)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import DIGITS_ARCH

CUMSUM = ("import torch\nfrom torch import nn\n"
          "class Net(nn.Module):\n"
          "    def __init__(self):\n"
          "        super().__init__()\n"
          "        self.conv = nn.Conv2d(1, 8, 3, padding=1)\n"
          "        self.fc = nn.Linear(8 * 64, 10)\n"
          "    def forward(self, x):\n"
          "        return self.fc(torch.cumsum(self.conv(x), dim=2).flatten(1))\n"
          "def build():\n"
          "    torch.manual_seed(0)\n"
          "    return Net().eval()\n")


@pytest.fixture
def cumsum(tmp_path) -> str:
    """A model with a CumSum, which tflite-fp32 cannot express (onnx2tf keeps its axis
    in NCHW order: wrong results)."""
    (tmp_path / "cumsum.py").write_text(CUMSUM)
    return f"{tmp_path}/cumsum.py:build"


def _manifest(out: Path) -> dict:
    return json.loads((out / "manifest.json").read_text())


def test_skip_unsupported_builds_the_targets_that_can(cli, cumsum, tmp_path):
    out = tmp_path / "o"
    r = cli("convert", cumsum, "--out", out, "-t", "tflite:fp32", "-t", "onnx:fp32",
            "--skip-unsupported", "--no-budget")
    assert r.code == 0, r.err  # every target that was not skipped is ok
    assert "tflite-fp32: skipped" in r.err and "(CumSum)" in r.err
    m = _manifest(out)
    skipped, built = m["targets"]
    assert skipped["name"] == "tflite-fp32" and skipped["status"] == "skipped"
    assert [n["op_type"] for n in skipped["unsupported_nodes"]] == ["CumSum"]
    assert "path" not in skipped and not (out / "targets" / "tflite-fp32").exists()
    assert built["name"] == "onnx-fp32" and built["status"] == "ok"
    md = (out / "report.md").read_text()
    assert "## Skipped targets (--skip-unsupported)" in md
    assert "| tflite-fp32 | " in md and "| CumSum |" in md


def test_without_skip_unsupported_the_build_still_stops_before_work(cli, cumsum, tmp_path):
    r = cli("convert", cumsum, "--out", tmp_path / "o", "-t", "tflite:fp32", "-t", "onnx:fp32")
    assert r.code == 4 and "(CumSum) -> tflite-fp32" in r.err
    assert "--skip-unsupported" in r.err  # the fix names the way on
    assert not (tmp_path / "o").exists()


def test_skip_unsupported_with_no_target_left_stops_before_work(cli, cumsum, tmp_path):
    r = cli("convert", cumsum, "--out", tmp_path / "o", "-t", "tflite:fp32",
            "--skip-unsupported")
    assert r.code == 4 and "leaves no target to build" in r.err, r.err
    assert not (tmp_path / "o").exists()


@pytest.mark.slow
def test_skip_unsupported_holds_before_compression_and_cli_sets_finetune(cli, cumsum, tmp_path):
    """The compat check before compressing skips too, and --finetune-epochs/--finetune-lr
    reach the fine-tune (recorded in the manifest), with every stage timed."""
    out = tmp_path / "o"
    r = cli("build", cumsum, "--out", out, "-t", "tflite:fp32", "-t", "onnx:fp32",
            "--skip-unsupported", "--prune-ratio", "0.25", "--finetune-epochs", "1",
            "--finetune-lr", "0.005", "--no-budget")
    assert r.code == 0, r.err
    m = _manifest(out)
    finetune = m["compress"]["prune"]["finetune"]
    assert finetune["epochs"] == 1 and finetune["lr"] == 0.005
    assert [t["status"] for t in m["targets"]] == ["skipped", "ok"]
    stages = [t["stage"] for t in m["timings"]]
    assert stages[:2] == ["load", "compat"] and {"prune", "finetune", "export"} <= set(stages)


def test_manifest_and_report_carry_each_stages_wall_time(cli, digits_ckpt, tmp_path):
    out = tmp_path / "o"
    r = cli("build", digits_ckpt, "--arch", DIGITS_ARCH, "--out", out, "-t", "onnx:fp32",
            "-t", "onnx:int8")
    assert r.code == 0, r.err
    m = _manifest(out)
    timings = m["timings"]
    assert [t["stage"] for t in timings] == ["load", "export", "compat", "quantize",
                                             "target onnx-fp32", "target onnx-int8"]
    assert all(t["seconds"] >= 0 for t in timings)
    assert sum(t["seconds"] for t in timings) <= m["duration_s"] + 0.05
    md = (out / "report.md").read_text()
    assert "## Stage times" in md and "| target onnx-int8 |" in md


@pytest.mark.parametrize("args,words", [
    (("--finetune-epochs", "2"), "nothing is pruned"),
    (("--finetune-lr", "0.1"), "nothing is pruned"),
    (("--qat-epochs", "2"), "--qat-epochs sets quantization-aware training, which is off"),
    (("--qat-epochs", "2", "--no-qat", "--prune-ratio", "0.3"), "which is off"),
    (("--prune-ratio", "0.3", "--finetune-lr", "0"), "--finetune-lr 0.0: input should be "
                                                     "greater than 0"),
    (("--prune-ratio", "0.3", "--finetune-epochs", "5000"), "--finetune-epochs 5000: input "
                                                            "should be less than or equal"),
    (("--qat", "--qat-epochs", "-1"), "--qat-epochs -1"),
])
def test_training_settings_that_cannot_apply_are_input_errors(cli, digits_ckpt, tmp_path, args,
                                                              words):
    r = cli("build", digits_ckpt, "--arch", DIGITS_ARCH, "--out", tmp_path / "o",
            "-t", "onnx:fp32", *args)
    assert r.code == 2 and words in r.err, r.err
    assert "Traceback" not in r.err and not (tmp_path / "o").exists()


def test_compress_command_takes_the_training_settings(cli, digits_ckpt, tmp_path):
    r = cli("compress", digits_ckpt, "--arch", DIGITS_ARCH, "--out", tmp_path / "c",
            "--prune-ratio", "0.25", "--finetune-epochs", "1", "--finetune-lr", "0.02",
            "--no-qat", "--no-budget", "--json")
    assert r.code == 0, r.err
    finetune = json.loads(r.out)["prune"]["finetune"]
    assert finetune["epochs"] == 1 and finetune["lr"] == 0.02
    bad = cli("compress", digits_ckpt, "--arch", DIGITS_ARCH, "--out", tmp_path / "d",
              "--finetune-epochs", "1", "--no-qat")
    assert bad.code == 2 and "nothing is pruned" in bad.err


@pytest.mark.slow
def test_qat_epochs_reach_quantization_aware_training(cli, digits_ckpt, tmp_path):
    """The host profile trains QAT for 3 epochs; --qat-epochs 1 makes it one."""
    r = cli("compress", digits_ckpt, "--arch", DIGITS_ARCH, "--out", tmp_path / "c",
            "--qat", "--qat-epochs", "1", "--no-budget", "--json")
    assert r.code == 0, r.err
    qat = json.loads(r.out)["qat"]
    assert qat["epochs"] == 1 and qat["epochs_run"] == 1
