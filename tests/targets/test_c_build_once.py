"""The C target compiles its folder once per build: validation runs the binary that
``convert`` compiled to prove the folder builds, instead of compiling the same sources
a second time (~10-40 s per target for MobileNetV2 on 2 shared cores)."""

from __future__ import annotations

import time

import numpy as np

from tests.targets._helpers import ort_run
from tests.targets.test_c_target import _ctx


def test_runner_reuses_the_binary_convert_compiled(tmp_path, digits_onnx, digits_splits):
    from edgesmith.targets import c_target

    t, ctx = _ctx(tmp_path, digits_onnx, digits_splits.calib_x)
    a = t.convert(ctx)
    converted_at = time.time()
    time.sleep(1.1)  # a compile after this point would stamp a later mtime
    x = digits_splits.val_x[:4]
    y = t.runner(a)(x)
    binary = c_target._host_build(a) / "edgesmith_bench"
    assert binary.stat().st_mtime < converted_at  # copied from convert's build, not remade
    assert not (a.path / "edgesmith_bench").exists()  # the artifact keeps sources only
    assert np.abs(y - ort_run(digits_onnx, x)).max() < 1e-4 * np.abs(y).max()


def test_runner_of_an_artifact_from_elsewhere_still_compiles_it(tmp_path, digits_onnx,
                                                                digits_splits):
    """A cached artifact (no convert in this process) gets its own host build."""
    import shutil

    from edgesmith.artifact import Artifact
    from edgesmith.targets import c_target

    t, ctx = _ctx(tmp_path, digits_onnx, digits_splits.calib_x)
    a = t.convert(ctx)
    copy = tmp_path / "copy"
    shutil.copytree(a.path, copy)
    b = Artifact.of(copy, a.format, a.precision, **a.meta)
    x = digits_splits.val_x[:2]
    np.testing.assert_allclose(t.runner(b)(x), t.runner(a)(x), atol=0)
    assert (c_target._host_build(b) / "edgesmith_bench").is_file()
