"""edgesmith as a CI gate: the example release pipeline and the exit-code contract."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from tests.conftest import DIGITS_ARCH, ROOT

RELEASE = ROOT / "examples" / "ci" / "release.sh"
EDGESMITH = str(Path(sys.executable).with_name("edgesmith"))


def _release(tmp_path, ckpt, profile="host"):
    env = {**os.environ, "EDGESMITH": EDGESMITH, "MODEL": str(ckpt), "ARCH": DIGITS_ARCH,
           "PROFILE": str(profile), "OUT": str(tmp_path / "rel"), "RUNS": "10",
           "EDGESMITH_CACHE": str(tmp_path / "cache")}
    return subprocess.run(["bash", str(RELEASE)], env=env, capture_output=True, text=True,
                          timeout=600)


@pytest.mark.slow
def test_release_pipeline_exports_validates_benches_quantizes_and_packages(tmp_path,
                                                                           digits_ckpt):
    r = _release(tmp_path, digits_ckpt)
    assert r.returncode == 0, r.stderr[-2000:]
    rel = tmp_path / "rel"
    fp32 = json.loads((rel / "fp32.json").read_text())
    int8 = json.loads((rel / "int8.json").read_text())
    assert fp32["targets"][0]["status"] == int8["targets"][0]["status"] == "ok"
    bench = json.loads((rel / "bench.json").read_text())
    assert bench["devices"], bench
    with tarfile.open(rel / "release.tar.gz") as tar:
        names = tar.getnames()
    assert "fp32/manifest.json" in names and "int8/targets/onnx-int8/model.onnx" in names
    assert (rel / "release.tar.gz.sha256").read_text().split()[0]


@pytest.mark.slow
def test_release_pipeline_stops_with_exit_3_on_a_budget_miss(tmp_path, digits_ckpt):
    profile = tmp_path / "tight.yaml"
    profile.write_text("extends: host\nbudgets:\n  model_kb: 1\n")
    r = _release(tmp_path, digits_ckpt, profile)
    assert r.returncode == 3, r.stderr[-2000:]
    assert "size" in r.stderr and "budget" in r.stderr
    assert not (tmp_path / "rel" / "release.tar.gz").exists()
