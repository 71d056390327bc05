"""benchmarks/compress_zoo.py without training: its figures carry the intervals the build
reports, the targets name what was missed, and a bad request stops before any work."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "compress_zoo.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("edgesmith_bench_compress_zoo", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _row(bench, ok_fp32, ok_ft, ok_q, macs=(1_000_000, 490_000)) -> dict:
    row = {"model": "resnet18", "macs_target": 0.5, "macs_before": macs[0],
           "macs_after": macs[1], "macs_reduction": 1 - macs[1] / macs[0],
           "fp32": bench.top1(ok_fp32), "pruned_finetuned": bench.top1(ok_ft),
           "qat_int8": bench.top1(ok_q), "drop_finetune": bench.drop(ok_fp32, ok_ft),
           "drop_qat_vs_pruned": bench.drop(ok_ft, ok_q),
           "finetune": {"epochs": 8, "epochs_run": 8, "lr": 1e-3},
           "qat": {"epochs": 2, "epochs_run": 2, "lr": 1e-4}, "wall_s": 12.0}
    row["targets"] = bench.verdicts(row)
    return row


def test_figures_are_percent_with_the_builds_own_intervals(bench):
    from edgesmith.pipeline.validate import paired_drop_ci, wilson

    ref = np.array([True] * 90 + [False] * 10)
    art = ref.copy()
    art[:3] = False  # three flips: 3 pt down
    assert bench.top1(ref) == {"top1": 90.0, "ci95": [round(100 * v, 2) for v in wilson(90, 100)]}
    d = bench.drop(ref, art)
    assert d["pt"] == 3.0
    assert d["ci95"] == [round(100 * v, 2) for v in paired_drop_ci(ref, art)]
    assert d["ci95"][0] < 3.0 < d["ci95"][1]


def test_a_finetune_drop_over_1_5_pt_is_named_as_missed_in_the_table(bench):
    n = 1000
    fp32 = np.arange(n) < 900                   # 90.0 %
    ft = np.arange(n) < 884                     # 88.4 %: 1.6 pt down, over 1.5
    q = np.arange(n) < 882                      # 0.2 pt under the pruned model: within 0.5
    row = _row(bench, fp32, ft, q)
    assert row["targets"] == {"macs_removed": True, "finetune_drop_le_1.5pt": False,
                              "qat_within_0.5pt_of_pruned": True}
    assert json.loads(json.dumps(row))["targets"] == row["targets"]  # --json prints rows
    text = bench.table([row])
    assert "missed: finetune_drop_le_1.5pt" in text
    assert "+1.6 [" in text and "-51 %" in text
    met = _row(bench, fp32, np.arange(n) < 890, np.arange(n) < 888)
    assert "| met" in bench.table([met])


def test_unknown_model_exits_2_naming_the_zoo(bench, capsys):
    assert bench.main(["--only", "resnet81"]) == 2
    err = capsys.readouterr().err
    assert "unknown zoo model 'resnet81'" in err and "resnet18" in err


def test_a_missing_checkpoint_exits_2_with_the_command_that_trains_it(bench, tmp_path,
                                                                      monkeypatch, capsys):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert bench.main(["--only", "mobilenetv2", "--size", "64"]) == 2
    err = capsys.readouterr().err
    assert "no checkpoint" in err and "examples/zoo/train.py mobilenetv2 --size 64" in err


def test_a_non_cnn_zoo_model_is_refused(bench, capsys):
    assert bench.main(["--only", "kws_gru"]) == 2
    assert "not one of the zoo CNNs" in capsys.readouterr().err
