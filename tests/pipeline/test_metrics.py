"""Tasks and metrics: the registry's figures, --task defaults, and a user metric from a file
that the accuracy_drop budget judges and the report names; a metric that raises or
returns a non-number is exit 2 naming its file."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from edgesmith.errors import DataError, UsageError
from edgesmith.pipeline import metrics, validate
from tests.conftest import DIGITS_ARCH

# distinct output values / all outputs: ~1 for float outputs, tiny for INT8 outputs, which
# sit on a grid of at most 256 levels; so INT8 drops by ~0.9 and FP32 by ~0
DISTINCT = '''
import numpy as np

unit = "distinct share"

def distinct(outputs, labels):
    return len(np.unique(outputs)) / outputs.size

distinct.unit = unit
'''


def test_builtin_metrics_on_known_outputs():
    out = np.array([[0.1, 0.9, 0.0], [0.8, 0.1, 0.1], [0.2, 0.3, 0.5]], np.float32)
    y = np.array([1, 2, 2])
    assert metrics.top1(out, y) == pytest.approx(2 / 3)
    assert metrics.top5(out, y) == 1.0  # three classes: every label is in the top 5
    assert metrics.mse(out, out + 0.5) == pytest.approx(0.25)
    assert metrics.cosine(out, 2 * out) == pytest.approx(1.0)
    assert metrics.BUILTIN["top1"].drop(0.9, 0.85) == pytest.approx(5.0)  # points
    assert metrics.BUILTIN["mse"].drop(0.1, 0.3) == pytest.approx(0.2)  # lower is better


def test_top5_counts_a_label_in_the_five_best():
    out = np.arange(10, dtype=np.float32)[None].repeat(2, 0)
    assert metrics.top5(out, np.array([5, 4])) == 0.5


@pytest.mark.parametrize("task,name", [("classify", "top1"), ("detect", "map50"),
                                       ("regress", "mse"), ("raw", "cosine")])
def test_task_picks_the_default_metric(task, name):
    assert metrics.resolve(task).name == name


def test_detection_module_is_imported_only_when_map_is_computed():
    sys.modules.pop(metrics.DETECTION_MODULE, None)
    metrics.resolve("detect")
    assert metrics.DETECTION_MODULE not in sys.modules


@pytest.mark.parametrize("task,metric,words", [("segment", None, "--task 'segment'"),
                                               ("classify", "f1", "--metric 'f1'")])
def test_an_unknown_task_or_metric_is_a_usage_error(task, metric, words):
    with pytest.raises(UsageError, match=words):
        metrics.resolve(task, metric)


def test_a_non_top1_metric_gets_a_seeded_paired_bootstrap_interval():
    rng = np.random.default_rng(0)
    ref = rng.normal(size=(200, 4)).astype(np.float32)
    out = ref + rng.normal(scale=0.1, size=ref.shape).astype(np.float32)
    targets = ref.copy()
    a = validate.metric_figures(metrics.BUILTIN["mse"], out, targets, ref)
    b = validate.metric_figures(metrics.BUILTIN["mse"], out, targets, ref)
    assert a == b and a["reference"] == 0.0 and a["drop"] > 0
    assert a["drop_ci95"][0] <= a["drop"] <= a["drop_ci95"][1]


@pytest.mark.parametrize("body,words", [
    ("def m(outputs, labels):\n    raise KeyError('oops')\n", "raised KeyError"),
    ("def m(outputs, labels):\n    return 'high'\n", "returned 'high'"),
    ("def m(outputs, labels):\n    return float('nan')\n", "returned nan"),
    ("def m(outputs, labels):\n    return None\n", "returned None"),
])
def test_a_broken_user_metric_is_exit_2_naming_the_file(cli, tmp_path, body, words):
    f = tmp_path / "my_metric.py"
    f.write_text(body)
    r = cli("convert", DIGITS_ARCH, "--target", "onnx:fp32", "--metric", f"{f}:m",
            "--out", str(tmp_path / "out"))
    assert r.code == 2, (r.code, r.out, r.err)
    assert str(f) in r.err and words in r.err and "Traceback" not in r.err
    assert not (tmp_path / "out").exists()


def test_user_metric_calls_are_checked_directly(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("def m(outputs, labels):\n    return True\n")
    m = metrics.resolve("classify", f"{f}:m")
    with pytest.raises(DataError, match="expected a finite number"):
        m(np.zeros((2, 2)), np.zeros(2, int))


def test_a_user_metric_is_what_the_budget_judges_and_the_report_shows(cli, tmp_path,
                                                                       digits_ckpt: Path):
    f = tmp_path / "distinct.py"
    f.write_text(DISTINCT)
    profile = tmp_path / "p.yaml"
    profile.write_text("extends: host\nbudgets:\n  accuracy_drop: 0.5\n")
    out = tmp_path / "out"
    r = cli("convert", str(digits_ckpt), "--arch", DIGITS_ARCH, "--profile", str(profile),
            "--target", "onnx:fp32", "--target", "onnx:int8", "--metric", f"{f}:distinct",
            "--out", str(out))
    m = json.loads((out / "manifest.json").read_text())
    assert m["metric"]["name"] == "distinct" and m["metric"]["unit"] == "distinct share"
    by = {t["name"]: t for t in m["targets"]}
    fp32, int8 = by["onnx-fp32"], by["onnx-int8"]
    assert abs(fp32["accuracy_drop"]) < 0.05 and fp32["status"] == "ok"
    assert int8["accuracy_drop"] == int8["metric"]["drop"] > 0.5
    assert int8["status"] == "budget"
    assert r.code == 3, (r.code, r.out, r.err)
    assert "distinct drop" in r.err and "distinct share" in r.err
    report = (out / "report.md").read_text()
    assert f"primary metric: distinct from `{f}:distinct` (distinct share" in report
    assert "| onnx-int8 |" in report
    # top-1 is still measured beside it
    assert fp32["accuracy"] is not None and int8["accuracy"] is not None
