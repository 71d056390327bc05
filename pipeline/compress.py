"""``edgesmith compress``: load the model, data and profile, run the compress stage, and
write its manifest. Lives in the pipeline because it loads references (``model``,
``data``, ``profiles``); ``compress/`` itself only takes a module and arrays."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from edgesmith import __version__
from edgesmith.artifact import sha256_path, write_json_atomic
from edgesmith.compress.stage import Overrides, Progress, apply_overrides, run_compress
from edgesmith.errors import UsageError
from edgesmith.profiles import load as load_profile
from edgesmith.profiles import resolve_path

from . import data as data_mod
from . import model as model_mod


def compress_refs(
    model_ref: str,
    data_ref: str,
    profile_ref: str,
    out_dir: Path,
    *,
    arch: str | None = None,
    trust_pickle: bool = False,
    seed: int = 0,
    overrides: Overrides = Overrides(),
    no_budget: bool = False,
    progress: Progress | None = None,
    events: Any = None,
) -> dict[str, Any]:
    """What ``edgesmith compress`` does: load the three references, run the stage, write
    ``out_dir/manifest.json`` atomically (also when a gate fails with ``--no-budget`` off:
    then the manifest holds the figures up to the failing step), return the manifest."""
    profile_path = resolve_path(profile_ref)
    profile = load_profile(profile_path)
    apply_overrides(profile.compress, overrides)  # a flag mistake, before loading anything
    loaded = model_mod.load(model_ref, arch=arch, trust_pickle=trust_pickle)
    if loaded.torch_model is None:
        raise UsageError(f"{model_ref} is an ONNX file; compress needs the PyTorch model",
                         where=model_ref,
                         fix="pass file.py:build or a .pt checkpoint (with --arch)")
    splits = data_mod.load(data_ref, seed=seed)
    model_mod.check_forward(loaded.torch_model, splits.spec.batch_shape(1), model_ref)
    manifest: dict[str, Any] = {
        "edgesmith_version": __version__,
        "command": "compress",
        "inputs": {"model": model_ref, "arch": arch, "data": splits.summary(),
                   "profile": {"name": profile.name, "path": str(profile_path),
                               "sha256": sha256_path(profile_path)}},
        "compress": None,
    }
    out_dir = Path(out_dir)
    result = run_compress(loaded.torch_model, splits, profile, out_dir, overrides=overrides,
                          no_budget=no_budget, progress=progress, events=events)
    manifest["compress"] = result.section
    if result.error is not None:
        manifest["compress"] = {**result.section, "failed": result.error.what}
    write_json_atomic(out_dir / "manifest.json", manifest)
    if result.error is not None:
        raise result.error
    return manifest
