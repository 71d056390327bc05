"""The uploaded bench script's own pieces: no numpy on the C path, so they are checked
against numpy here."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edgesmith.devices import formats, remote, script


@pytest.mark.parametrize("dtype", ["<f4", ">f4", "<f8", ">f8"])
def test_npy_reader_matches_numpy_for_both_byte_orders(tmp_path, dtype):
    a = np.arange(2 * 3 * 4, dtype=dtype).reshape(2, 3, 4) / 7
    np.save(tmp_path / "a.npy", a)
    shape, flat = remote.read_npy(tmp_path / "a.npy")
    assert shape == (2, 3, 4)
    np.testing.assert_allclose(flat, a.astype(np.float64).ravel(), rtol=1e-6)


def test_truncated_npy_is_rejected(tmp_path):
    np.save(tmp_path / "a.npy", np.zeros((4, 4), np.float32))
    data = (tmp_path / "a.npy").read_bytes()
    (tmp_path / "a.npy").write_bytes(data[:-8])
    with pytest.raises(ValueError, match="truncated"):
        remote.read_npy(tmp_path / "a.npy")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0, 1e3, allow_nan=False), min_size=1, max_size=200),
       st.sampled_from([0, 50, 90, 99, 100]))
def test_percentiles_match_numpy(values, q):
    assert remote.percentile(sorted(values), q) == pytest.approx(np.percentile(values, q))


def test_parity_reports_error_cosine_and_top1():
    ref = [[0.0, 1.0, 0.0], [2.0, 0.0, 0.0]]
    out = [[0.0, 0.9, 0.0], [0.0, 0.0, 3.0]]
    p = remote.parity(out, ref)
    assert p["max_abs_err"] == pytest.approx(3.0)
    assert p["top1_agreement"] == 0.5
    a, b = np.array(out).ravel(), np.array(ref).ravel()
    assert p["cosine"] == pytest.approx(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


def _zone(root, name, energy, max_range):
    z = root / name
    z.mkdir(parents=True, exist_ok=True)
    (z / "energy_uj").write_text(f"{energy}\n")
    (z / "max_energy_range_uj").write_text(f"{max_range}\n")


def test_rapl_energy_counts_a_counter_wrap(tmp_path):
    _zone(tmp_path, "intel-rapl:0", 999_000_000, 1_000_000_000)
    _zone(tmp_path, "intel-rapl:0:0", 5, 1_000_000_000)  # a sub-zone: not summed twice
    before = remote.read_energy_uj(str(tmp_path))
    _zone(tmp_path, "intel-rapl:0", 1_000_000, 1_000_000_000)
    after = remote.read_energy_uj(str(tmp_path))
    assert remote.energy_joules(before, after) == pytest.approx(2.0)


def test_energy_is_unavailable_without_counters(tmp_path):
    assert "no RAPL counters" in remote.read_energy_uj(str(tmp_path / "none"))


def test_verify_finds_a_tampered_upload(tmp_path):
    (tmp_path / "a.bin").write_bytes(b"hello")
    import hashlib

    good = hashlib.sha256(b"hello").hexdigest()
    (tmp_path / "files.json").write_text(json.dumps({"a.bin": [5, good], "b.bin": [1, good]}))
    r = subprocess.run([sys.executable, remote.__file__, "verify", "files.json"], cwd=tmp_path,
                       capture_output=True, text=True, check=True)
    doc = json.loads(r.stdout)
    assert doc["ok"] is False and doc["problems"] == ["b.bin: missing"]
    (tmp_path / "a.bin").write_bytes(b"hellO")
    doc = json.loads(subprocess.run([sys.executable, remote.__file__, "verify", "files.json"],
                                    cwd=tmp_path, capture_output=True, text=True).stdout)
    assert "a.bin: sha256 differs" in doc["problems"]
    assert doc["system"]["python"]


def test_coreml_off_macos_is_unsupported_not_a_crash(tmp_path):
    uploaded = script.write(formats.discover(), tmp_path)  # the script as a device gets it
    np.save(tmp_path / "x.npy", np.zeros((2, 1, 8, 8), np.float32))
    np.save(tmp_path / "r.npy", np.zeros((2, 10), np.float32))
    r = subprocess.run([sys.executable, uploaded, "bench", "--format", "coreml",
                        "--model", "m.mlpackage", "--input", "x.npy", "--reference", "r.npy"],
                       cwd=tmp_path, capture_output=True, text=True, check=True)
    doc = json.loads(r.stdout)
    if sys.platform != "darwin":
        assert doc["status"] == "unsupported" and "macOS" in doc["message"]
