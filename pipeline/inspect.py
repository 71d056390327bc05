"""``edgesmith inspect``: export + optimise a model and ask every target about every node."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from edgesmith.convert.onnx_qdq import quantize_qdq
from edgesmith.errors import ModelLoadError
from edgesmith.inputs import CalibrationSet
from edgesmith.profiles import load as load_profile
from edgesmith.profiles import resolve_path
from edgesmith.targets import codegen, mcu_size
from edgesmith.targets.c_target import arena_budget
from edgesmith.targets.mcu_size import targets_mcu

from . import data as data_mod
from . import model as model_mod
from .stages import compat_targets, resolve_targets

CHECK_SAMPLES = 32  # the optimiser checks its output against the export on this many
DATA_FIX = ("pass --data with samples the model takes (a .npz whose x is (N, *input shape), "
            "or file.py:callable): the data decides the input shape")


def inspect(model_ref: str, profile_ref: str, *, data: str | None = None,
            arch: str | None = None, trust_pickle: bool = False,
            opset: int | None = None) -> dict[str, Any]:
    """Without ``data`` the input shape comes from the ONNX graph, or for a torch model
    from the demo's digits (1x8x8); when neither fits, the error asks for --data.
    ``opset``: the torch export's, as ``build --opset`` (None: 17 or what an op needs)."""
    from edgesmith.convert import compat, export, optimize

    export.check_opset(opset)  # a wrong number stops before the model is loaded
    profile_path = resolve_path(profile_ref)
    profile = load_profile(profile_path)
    resolved = resolve_targets(profile, None, str(profile_path))
    loaded = model_mod.load(model_ref, arch=arch, trust_pickle=trust_pickle)
    export.check_opset(opset, None if loaded.torch_model is not None else model_ref)
    shape, samples = _input(loaded, data)
    with tempfile.TemporaryDirectory(prefix="edgesmith-inspect-") as work:
        if loaded.torch_model is not None:
            raw = export.export_onnx(loaded.torch_model, shape, Path(work) / "raw.onnx",
                                     opset=opset)
        else:
            raw = loaded.onnx_path
        opt = optimize.optimize(raw, Path(work) / "model.onnx", samples)
        report = compat.check(opt.path, compat_targets(resolved))
        used = export.exported_opset(raw)
        mcu = [mcu_estimate(spec, o, opt.path, samples, Path(work), profile)
               for spec, o in resolved if _mcu_c_int8(spec, o)]
    return {"model": model_ref, "profile": profile.name, "opset": used,
            "optimize": opt.summary(), **report.to_json(), **({"mcu": mcu} if mcu else {})}


def _mcu_c_int8(spec: Any, options: Any) -> bool:
    """An int8 C target the profile cross-compiles for a Cortex-M (weights in flash)."""
    return spec.format.value == "c" and spec.precision.value == "int8" and targets_mcu(
        getattr(options, "cross_cc", None), getattr(options, "cross_cflags", ""))


def mcu_estimate(spec: Any, options: Any, onnx_path: Path, samples: np.ndarray, work: Path,
                 profile: Any) -> dict[str, Any]:
    """Flash and RAM of ``spec`` before any build: the model quantized on ``samples``
    (sizes do not depend on the scales), lowered and generated for the profile's cross
    compiler, its library (all but the weights array, counted from the plan) compiled and
    measured as the build's size check does (targets/mcu_size.py)."""
    qdq = quantize_qdq(onnx_path, CalibrationSet(np.ascontiguousarray(samples)),
                       work / "mcu_qdq.onnx")
    folder = work / f"mcu-{spec.name}"
    codegen.from_onnx(qdq, folder, precision="int8", embedded=True,
                      deploy_cc=options.cross_cc, deploy_cflags=options.cross_cflags,
                      requant=options.requant, tiling=options.tiling,
                      arena_budget=arena_budget(profile),
                      input=options.input)  # the arena the build will plan
    s = mcu_size.measure(folder, options.cross_cc, options.cross_cflags)
    return {"target": spec.name, "cc": f"{options.cross_cc} {options.cross_cflags}",
            **s.figures(), "model_kb": profile.budgets.model_kb,
            "arena_kb": profile.budgets.arena_kb}


def _input(loaded: model_mod.LoadedModel, data: str | None) -> tuple[tuple[int, ...], np.ndarray]:
    """(batch-of-one shape, samples for the optimiser's check) the model is inspected at."""
    if data is not None:
        splits = data_mod.load(data)
        model_mod.check_input(loaded, splits.spec.batch_shape(1), data)
        return splits.spec.batch_shape(1), splits.val_x[:CHECK_SAMPLES]
    if loaded.onnx_path is not None:
        return _onnx_declared_input(loaded)
    splits = data_mod.digits()
    shape = splits.spec.batch_shape(1)
    try:
        model_mod.check_forward(loaded.torch_model, shape, loaded.ref)
    except ModelLoadError as e:
        raise ModelLoadError(
            f"without --data, inspect feeds the built-in digits input {list(shape)}, "
            f"which the model does not take: {e.what}", where=loaded.ref, fix=DATA_FIX,
        ) from None
    return shape, splits.val_x[:CHECK_SAMPLES]


def _onnx_declared_input(loaded: model_mod.LoadedModel) -> tuple[tuple[int, ...], np.ndarray]:
    """The graph's own input shape, with seeded random samples of it (only the
    optimiser's numeric check sees them)."""
    name, dims = model_mod.onnx_input_shape(loaded.onnx_path)
    sample = dims[1:] if dims else []
    if dims is None or not dims or not all(isinstance(d, int) and d > 0 for d in sample):
        declared = "no shape" if dims is None else "[" + ", ".join(map(str, dims)) + "]"
        raise ModelLoadError(
            f"without --data, inspect takes the input shape from the graph, but input "
            f"{name!r} is declared as {declared}", where=loaded.ref, fix=DATA_FIX)
    batch = dims[0] if isinstance(dims[0], int) and dims[0] > 0 else CHECK_SAMPLES
    rng = np.random.default_rng(0)
    samples = rng.standard_normal((batch, *sample)).astype(np.float32)
    return (1, *sample), samples
