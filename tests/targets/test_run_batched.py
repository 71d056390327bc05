"""``edgesmith_bench --samples N``: validation's batch in one process, not one per sample.

The batched mode must give exactly what the single-sample path (the one devices use)
gives, sample for sample, and a file that does not hold N samples must be refused with
the sizes, never read past its end."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

from edgesmith.errors import ConversionError
from edgesmith.targets import run


def _per_sample(folder: Path, x: np.ndarray) -> np.ndarray:
    """One single-sample ``edgesmith_bench`` process per sample: the devices' path."""
    return np.concatenate([run.run(folder, x[i:i + 1]) for i in range(len(x))])


@pytest.mark.parametrize("fixture", ["digits_c", "digits_c_int8"])
def test_batched_outputs_equal_per_sample_runs_bit_for_bit(fixture, request, digits_splits):
    folder = request.getfixturevalue(fixture)
    x = digits_splits.val_x[:13]  # odd: no sample lines up with a power of two by luck
    (ishape,), _ = run.io_shapes(folder)
    assert ishape[0] == 1  # the model fixed its batch: run() loops the samples
    batched = run.run(folder, x)
    assert batched.shape[0] == len(x)
    assert np.array_equal(batched.view(np.uint32), _per_sample(folder, x).view(np.uint32))


def test_batched_mode_runs_one_process(digits_c, digits_splits, tmp_path):
    """The point of the mode: one process for the whole batch, its outputs appended."""
    x = np.ascontiguousarray(digits_splits.val_x[:5], dtype="<f4")
    fin, fout = tmp_path / "in.raw", tmp_path / "out.raw"
    x.tofile(fin)
    res = run.run_bench(digits_c / "edgesmith_bench",
                        ["--weights", str(digits_c / "weights.bin"), "--samples", "5",
                         "--input", str(fin), "--output", str(fout)], cwd=digits_c)
    assert res["samples"] == 5
    _, (oshape,) = run.io_shapes(digits_c)
    assert fout.stat().st_size == 5 * int(np.prod(oshape)) * 4


def test_empty_batch_gives_empty_output(digits_c, digits_splits):
    out = run.run(digits_c, digits_splits.val_x[:0])
    assert out.shape[0] == 0


@pytest.mark.parametrize("keep", [0.5, 2.5, 3.5])
def test_input_file_not_holding_n_samples_is_refused_with_sizes(digits_c, digits_splits,
                                                                 tmp_path, keep):
    x = np.ascontiguousarray(digits_splits.val_x[:4], dtype="<f4")
    each = x[0].nbytes
    fin, fout = tmp_path / "in.raw", tmp_path / "out.raw"
    fin.write_bytes(x.tobytes()[:int(keep * each)])  # cut inside or between samples
    p = subprocess.run([str(digits_c / "edgesmith_bench"), "--weights",
                        str(digits_c / "weights.bin"), "--samples", "3", "--input", str(fin),
                        "--output", str(fout)], capture_output=True, text=True, cwd=digits_c)
    assert p.returncode == 2
    size = int(keep * each)
    assert f"{fin} is {size} bytes; --samples 3 needs 3 x {each} = {3 * each} bytes" in p.stderr
    assert "Segmentation" not in p.stderr and p.stdout == ""
    assert not fout.exists()  # nothing written for a refused batch


def test_truncated_batch_through_run_bench_is_a_conversion_error(digits_c, digits_splits,
                                                                 tmp_path):
    x = np.ascontiguousarray(digits_splits.val_x[:2], dtype="<f4")
    fin = tmp_path / "in.raw"
    fin.write_bytes(x.tobytes()[:-4])
    with pytest.raises(ConversionError, match="needs 2 x"):
        run.run_bench(digits_c / "edgesmith_bench",
                      ["--samples", "2", "--input", str(fin), "--output",
                       str(tmp_path / "out.raw")], cwd=digits_c)


@pytest.mark.parametrize("args", [["--samples", "0"], ["--samples", "x"], ["--samples", "2"],
                                  ["--samples", "2", "--input", "in.raw"]])
def test_samples_flag_misuse_prints_usage(digits_c, args):
    p = subprocess.run([str(digits_c / "edgesmith_bench"), *args], capture_output=True,
                       text=True, cwd=digits_c)
    assert p.returncode == 2
    assert "--samples N" in p.stderr


def test_folder_without_samples_mode_still_runs_per_sample(digits_c, digits_splits, tmp_path):
    """A C folder generated before --samples existed (a stage cache entry) keeps working."""
    import shutil

    old = tmp_path / "old"
    shutil.copytree(digits_c, old)
    src = (old / "bench_main.c").read_text()
    (old / "bench_main.c").write_text(src.replace('"--samples"', '"--samples-x"'))
    (old / "edgesmith_bench").unlink()
    run.build(old)
    x = digits_splits.val_x[:3]
    assert np.array_equal(run.run(old, x), run.run(digits_c, x))
