"""benchmarks/zoo.py: builds only the targets asked for (a full host build of a large CNN
takes minutes per format) and reports each drop with its paired 95 % interval."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from .conftest import zoo_module

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "zoo.py"


def _bench():
    spec = importlib.util.spec_from_file_location("edgesmith_bench_zoo", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def tiny_kws(tmp_path, monkeypatch, zoo_data):
    """A one-epoch conv+GRU on 48/16/24 keyword samples in a private cache."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv(zoo_data.SAMPLES_ENV, "48,16,24")
    assert zoo_module("train").main(["kws_gru", "--epochs", "1"]) == 0
    return tmp_path


def test_only_the_asked_target_is_built_and_its_drop_has_an_interval(tiny_kws, capsys):
    capsys.readouterr()
    out = tiny_kws / "builds"
    assert _bench().main(["--only", "kws_gru", "--target", "onnx:int8", "--json",
                          "--out", str(out)]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["target"] for r in rows] == ["onnx-int8"]
    row = rows[0]
    assert row["status"] in ("ok", "fallback"), row
    lo, hi = row["drop_ci95"]
    assert lo <= row["drop_pt"] <= hi
    manifest = json.loads((out / "kws_gru-keywords" / "manifest.json").read_text())
    assert [t["name"] for t in manifest["targets"]] == ["onnx-int8"]


def test_the_table_prints_the_drop_interval():
    bench = _bench()
    row = {"model": "m", "target": "onnx-int8", "status": "ok", "reference_accuracy": 0.9,
           "accuracy": 0.895, "drop_pt": 0.5, "drop_ci95": [-0.25, 1.5], "size_bytes": 2e6,
           "p50_ms": 0.1, "build_s": 3.0}
    text = bench.table([row])
    assert "drop 95% CI" in text.splitlines()[0]
    assert "[-0.25, 1.50]" in text.splitlines()[2]
