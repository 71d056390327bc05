"""Judging with enough data (issue 15 item 6): accuracy and drop come with 95 % intervals,
a validation split too small to resolve the budget is called out with the samples it
would need, and --val-fraction / --val-samples set the split."""

from __future__ import annotations

import json

import numpy as np
import pytest

from edgesmith.pipeline import validate
from edgesmith.pipeline.data import SplitRule, digits
from tests.conftest import DIGITS_ARCH

ONLY = ("-t", "onnx:fp32", "-t", "onnx:int8")


@pytest.mark.parametrize("k,n", [(0, 10), (10, 10), (350, 359), (51, 100), (1, 51)])
def test_accuracy_interval_is_scipys_wilson_interval(k, n):
    from scipy.stats import binomtest

    ci = binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
    assert validate.wilson(k, n) == pytest.approx((ci.low, ci.high), abs=1e-9)


def test_drop_interval_with_no_flipped_prediction_still_has_width():
    """No flip in n samples bounds the drop by z^2/(n+z^2), not by 0."""
    same = np.ones(359, bool)
    lo, hi = validate.paired_drop_ci(same, same)
    z2 = validate.Z95 ** 2
    assert hi == pytest.approx(z2 / (359 + z2), rel=1e-6) and lo == pytest.approx(-hi)


def test_drop_interval_is_paired_only_disagreements_count():
    """Two models wrong on the same 40 of 400 samples have no measurable drop; a model
    wrong on 12 samples the reference gets right has a drop the interval excludes 0 from."""
    ref = np.ones(400, bool)
    ref[:40] = False
    lo, hi = validate.paired_drop_ci(ref, ref.copy())
    assert lo < 0 < hi and hi < 0.01
    worse = ref.copy()
    worse[40:52] = False
    lo, hi = validate.paired_drop_ci(ref, worse)
    assert 0 < lo < 0.03 < hi


def test_drop_interval_covers_the_true_drop_95_percent_of_the_time():
    rng = np.random.default_rng(0)
    for p_only_ref, p_only_art, n in [(0.02, 0.005, 359), (0.01, 0.0, 200), (0.05, 0.02, 51)]:
        hits = 0
        for _ in range(400):
            u = rng.random(n)
            ref, art = np.ones(n, bool), np.ones(n, bool)
            art[u < p_only_ref] = False
            ref[(u >= p_only_ref) & (u < p_only_ref + p_only_art)] = False
            lo, hi = validate.paired_drop_ci(ref, art)
            hits += lo <= p_only_ref - p_only_art <= hi
        assert hits / 400 >= 0.92, (p_only_ref, p_only_art, n, hits)


def test_samples_needed_is_where_a_flawless_artifact_is_shown_within_budget():
    need = validate.samples_to_resolve(1.0)
    assert need == 381
    for n, resolves in ((need - 1, False), (need, True)):
        hi_pt = 100 * validate.paired_drop_ci(np.ones(n, bool), np.ones(n, bool))[1]
        assert (hi_pt <= 1.0) is resolves
        assert validate.resolution(n, 1.0)["resolves_budget"] is resolves
    assert validate.resolution(51, 1.0)["one_flip_pt"] == pytest.approx(1.9608, abs=1e-4)
    assert validate.samples_to_resolve(0.0) is None  # a zero budget is never shown met


def test_val_fraction_and_val_samples_set_a_deterministic_disjoint_split():
    a, b = digits(3, SplitRule(val_fraction=0.3)), digits(3, SplitRule(val_fraction=0.3))
    assert np.array_equal(a.val_x, b.val_x) and len(a.val_x) == round(1797 * 0.3)
    rows = np.concatenate([a.origin[k] for k in ("train", "calib", "val")])
    assert sorted(rows) == list(range(1797))
    assert len(a.train_x) / len(a.calib_x) == pytest.approx(7, rel=0.02)
    s = digits(0, SplitRule(val_samples=400))
    assert len(s.val_x) == 400 and s.summary()["split"]["val_samples"] == 400
    # the default split is exactly what it always was
    d = digits(0)
    assert (len(d.train_x), len(d.calib_x), len(d.val_x)) == (1258, 180, 359)


def test_build_says_when_the_split_cannot_resolve_the_budget(cli, digits_ckpt, tmp_path):
    out = tmp_path / "o"
    r = cli("build", digits_ckpt, "--arch", DIGITS_ARCH, "--out", out, *ONLY)
    assert r.code == 0, r.err
    assert "359 validation samples cannot resolve the 1 pt accuracy budget" in r.err
    assert "--val-samples 381" in r.err
    m = json.loads((out / "manifest.json").read_text())
    assert m["validation"]["resolves_budget"] is False
    assert m["validation"]["samples_needed"] == 381
    lo, hi = m["reference"]["accuracy_ci95"]
    assert lo < m["reference"]["accuracy"] < hi
    for t in m["targets"]:
        assert t["samples"] == 359
        assert t["accuracy_ci95"][0] <= t["accuracy"] <= t["accuracy_ci95"][1]
        d_lo, d_hi = t["accuracy_drop_ci95"]
        assert d_lo <= t["accuracy_drop"] <= d_hi and d_hi - d_lo > 1.0
    md = (out / "report.md").read_text()
    assert "too small to judge the budget" in md and "| drop 95% CI |" in md


def test_val_samples_large_enough_resolve_the_budget(cli, digits_ckpt, tmp_path):
    out = tmp_path / "o"
    r = cli("build", digits_ckpt, "--arch", DIGITS_ARCH, "--out", out, *ONLY,
            "--val-samples", "400")
    assert r.code == 0, r.err
    assert "cannot resolve" not in r.err
    m = json.loads((out / "manifest.json").read_text())
    assert m["data"]["val"] == 400 and m["data"]["split"]["val_samples"] == 400
    assert m["validation"]["resolves_budget"] is True
    assert m["targets"][0]["samples"] == 400
    verdicts = {row.split("|")[6].strip() for row in (out / "report.md").read_text().splitlines()
                if row.startswith("| onnx-") and row.count("|") == 7}
    assert verdicts <= {"within", "undecided"} and verdicts


@pytest.mark.parametrize("args,words", [
    (("--val-fraction", "1.5"), "between 0 and 1"),
    (("--val-fraction", "0.2", "--val-samples", "100"), "pass one of them"),
    (("--val-samples", "1796"), "leaves 1 of the data's 1797 samples"),
    (("--val-samples", "0"), "at least 1"),
])
def test_impossible_split_is_an_input_error_before_any_work(cli, tmp_path, args, words):
    r = cli("convert", DIGITS_ARCH, "--out", tmp_path / "o",
            "-t", "onnx:fp32", *args)
    assert r.code == 2 and words in r.err, r.err
    assert "Traceback" not in r.err and not (tmp_path / "o").exists()


def test_val_fraction_cannot_resplit_a_callables_own_splits(cli, tmp_path):
    (tmp_path / "d.py").write_text(
        "import numpy as np\n"
        "def data():\n"
        "    r = np.random.default_rng(0)\n"
        "    part = lambda n: (r.normal(size=(n, 1, 8, 8)).astype('f4'), r.integers(0, 10, n))\n"
        "    return {'train': part(40), 'val': part(20)}\n")
    r = cli("convert", DIGITS_ARCH, "--data", f"{tmp_path}/d.py:data",
            "--out", tmp_path / "o", "-t", "onnx:fp32", "--val-fraction", "0.3")
    assert r.code == 2 and "returns its own splits" in r.err, r.err
