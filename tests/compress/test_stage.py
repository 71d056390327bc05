"""The compress stage and `edgesmith compress`: artifacts, manifest, gates, overrides."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edgesmith.compress.stage import Overrides, run_compress
from edgesmith.compress.train import evaluate
from edgesmith.errors import BudgetError, ModelLoadError, UsageError
from edgesmith.pipeline.model import load

ROOT = Path(__file__).resolve().parents[2]
ARCH = f"{ROOT}/examples/digits/model.py:build"
FAST_PRUNE = {"enabled": True, "ratio": 0.3, "finetune_epochs": 3, "lr": 0.01}


def test_prune_stage_writes_a_loadable_smaller_model(trained, splits, profile, tmp_path):
    res = run_compress(trained, splits, profile({"prune": FAST_PRUNE}, budget=None), tmp_path)
    p = res.section["prune"]
    for key in ("macs_before", "macs_after", "params_before", "params_after",
                "accuracy_before", "accuracy_after"):
        assert key in p
    assert p["macs_after"] < p["macs_before"]
    assert res.section["qat"] is None and res.qdq_onnx is None
    assert {"model_pt", "state_dict", "onnx"} == set(res.paths)
    reloaded = load(str(res.paths["model_pt"])).torch_model
    assert evaluate(reloaded, splits.val_x, splits.val_y) == pytest.approx(p["accuracy_after"])
    assert res.section["gates"][0]["ok"]
    assert evaluate(trained, splits.val_x, splits.val_y) == res.section["accuracy_fp32"]


def test_cli_prune_ratio_override_must_be_in_unit_interval(trained, splits, profile, tmp_path):
    with pytest.raises(UsageError, match="between 0 and 1"):
        run_compress(trained, splits, profile(), tmp_path,
                     overrides=Overrides(prune_ratio=1.5))


def test_pruning_past_the_budget_fails_with_the_figures(trained, splits, profile, tmp_path):
    ruin = {"prune": {"enabled": True, "ratio": 0.9, "finetune_epochs": 0}}
    res = run_compress(trained, splits, profile(ruin, budget=0.5), tmp_path)
    e = res.error
    assert isinstance(e, BudgetError)
    assert e.exit_code == 3 and "over the budget of 0.5 points" in e.what
    assert "finetune_epochs" in e.fix
    assert res.section["gates"][-1]["ok"] is False  # the figures up to the failing step


def test_torchscript_model_is_refused_before_any_work(trained, splits, profile, tmp_path):
    import torch

    scripted = torch.jit.trace(trained, torch.as_tensor(splits.val_x[:1]))
    with pytest.raises(ModelLoadError, match="TorchScript"):
        run_compress(scripted, splits, profile({"prune": FAST_PRUNE}), tmp_path)


def test_cli_budget_miss_exits_3_and_no_budget_reports(cli, digits_ckpt, profile_file,
                                                       tmp_path):
    prof = profile_file({"prune": {"enabled": True, "ratio": 0.9, "finetune_epochs": 0}},
                        budget=0.5)
    args = [digits_ckpt, "--arch", ARCH, "--data", "digits", "--profile", prof]
    r = cli("compress", *args, "--out", tmp_path / "a")
    assert r.code == 3, r.err
    assert "over the budget" in r.err and "Traceback" not in r.err
    failed = json.loads((tmp_path / "a" / "manifest.json").read_text())["compress"]
    assert failed["failed"] and failed["gates"][-1]["ok"] is False

    r = cli("compress", *args, "--out", tmp_path / "b", "--no-budget", "--json")
    assert r.code == 0, r.err
    section = json.loads(r.out)
    assert section["gates"][0]["ok"] is False and section["budget"]["enforced"] is False


def test_cli_rejects_an_onnx_model(cli, tmp_path, profile_file):
    onnx_file = tmp_path / "m.onnx"
    onnx_file.write_bytes(b"not really")
    r = cli("compress", onnx_file, "--profile", profile_file(), "--out", tmp_path / "o")
    assert r.code == 2 and "compress needs the PyTorch model" in r.err


@pytest.mark.slow
def test_cli_prune_and_qat_write_models_and_manifest(cli, digits_ckpt, profile_file, tmp_path):
    prof = profile_file({"prune": {"enabled": True, "macs_reduction": 0.5,
                                   "finetune_epochs": 4},
                         "qat": {"enabled": False, "epochs": 1},
                         "calibration": {"samples": 64}}, budget=2.0)
    out = tmp_path / "out"
    r = cli("compress", digits_ckpt, "--arch", ARCH, "--data", "digits", "--profile", prof,
            "--out", out, "--qat")
    assert r.code == 0, r.err
    for name in ("model.pt", "model_state.pt", "model.onnx", "model_qdq.onnx", "manifest.json"):
        assert (out / name).is_file(), name
    c = json.loads((out / "manifest.json").read_text())["compress"]
    assert c["prune"]["macs_reduction"] >= 0.5
    assert set(c["qat"]) >= {"accuracy_before", "accuracy_after", "epochs"}
    assert [g["step"] for g in c["gates"]] == ["prune + fine-tune",
                                              "QAT INT8 (QDQ ONNX in onnxruntime)"]
    assert all(g["ok"] for g in c["gates"])
    assert "manifest:" in r.out
