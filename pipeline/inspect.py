"""``edgesmith inspect``: export + optimise a model and ask every target about every node."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from edgesmith.profiles import load as load_profile
from edgesmith.profiles import resolve_path

from . import data as data_mod
from . import model as model_mod
from .stages import resolve_targets


def inspect(model_ref: str, profile_ref: str, *, data: str = "digits", arch: str | None = None,
            trust_pickle: bool = False) -> dict[str, Any]:
    from edgesmith.convert import compat, export, optimize

    profile_path = resolve_path(profile_ref)
    profile = load_profile(profile_path)
    resolved = resolve_targets(profile, None, str(profile_path))
    loaded = model_mod.load(model_ref, arch=arch, trust_pickle=trust_pickle)
    splits = data_mod.load(data)
    with tempfile.TemporaryDirectory(prefix="edgesmith-inspect-") as work:
        if loaded.torch_model is not None:
            model_mod.check_forward(loaded.torch_model, splits.spec.batch_shape(1), model_ref)
            raw = export.export_onnx(loaded.torch_model, splits.spec.batch_shape(1),
                                     Path(work) / "raw.onnx")
        else:
            raw = loaded.onnx_path
        opt = optimize.optimize(raw, Path(work) / "model.onnx", splits.val_x[:32])
        report = compat.check(opt.path, [spec for spec, _ in resolved])
    return {"model": model_ref, "profile": profile.name, "optimize": opt.summary(),
            **report.to_json()}
