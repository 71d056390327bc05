"""The output folder under hostile conditions: mount points, full and read-only disks,
/proc, kills mid-publish, file modes. Faults are real: tmpfs and bind mounts (root in
this sandbox may mount), real ENOSPC and EROFS from the kernel, real builds."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

from tests.conftest import DIGITS_ARCH

EDGESMITH = str(Path(sys.executable).with_name("edgesmith"))


@pytest.mark.slow
def test_qat_model_is_written_readable_like_every_other_output(digits_ckpt, tmp_path):
    """model_qdq.onnx went out 0600 (mkstemp's mode kept by torch's export) while every
    other output is 0666 & ~umask: another user's bench job could not read it."""
    import torch

    from edgesmith.artifact import write_json_atomic
    from edgesmith.compress.calibration import from_splits
    from edgesmith.compress.qat import export_qdq, quantize
    from edgesmith.pipeline.data import digits
    from edgesmith.pipeline.model import load
    from edgesmith.profiles.schema import Calibration

    model = load(str(digits_ckpt), arch=DIGITS_ARCH).torch_model
    splits = digits(0)
    qmodel = quantize(model, from_splits(splits, Calibration(samples=32)))
    before = os.umask(0o022)
    try:
        path = export_qdq(qmodel, torch.as_tensor(splits.val_x[:1]), tmp_path / "model_qdq.onnx")
        write_json_atomic(tmp_path / "manifest.json", {})
    finally:
        os.umask(before)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert stat.S_IMODE((tmp_path / "manifest.json").stat().st_mode) == 0o644
