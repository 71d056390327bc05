"""``edgesmith build``: load -> (compress) -> export -> optimize -> compat -> targets -> package.

Everything is written into a staging folder and published in one swap at the end, so the
previous good build survives any failure before that point.
"""

from __future__ import annotations

import platform
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edgesmith import __version__, outdir
from edgesmith.artifact import sha256_path, write_json_atomic
from edgesmith.errors import BudgetError, EdgesmithError
from edgesmith.profiles import load as load_profile
from edgesmith.profiles import resolve_path
from edgesmith.versions import tool_versions

from . import data as data_mod
from . import model as model_mod
from . import report, stages
from .events import Events


@dataclass
class BuildRequest:
    model: str
    data: str
    profile: str
    out: Path
    arch: str | None = None
    trust_pickle: bool = False
    targets: list[str] = field(default_factory=list)  # FORMAT[:PRECISION] filter
    no_budget: bool = False
    compress: bool | None = None  # None: as the profile says
    prune_ratio: float | None = None
    qat: bool | None = None
    seed: int = 0
    use_cache: bool = True  # --force turns it off


def _input_hashes(req: BuildRequest, profile_path: Path, splits) -> dict[str, str]:
    hashes = {"data": splits.sha256, "profile": sha256_path(profile_path)}
    model_file = Path(req.model.rpartition(":")[0] if ":" in req.model else req.model)
    if model_file.is_file():
        hashes["model"] = sha256_path(model_file)
    if req.arch and Path(req.arch.rpartition(":")[0]).is_file():
        hashes["arch"] = sha256_path(Path(req.arch.rpartition(":")[0]))
    return hashes


def _compress(req: BuildRequest, loaded, splits, profile, root: Path, events: Events,
              specs: list[Any], work_dir: Path):
    """Run compress/ when the profile (or the CLI) asks; return (model, qdq_onnx, section).
    The op-compat report runs first on the uncompressed model: pruning and QAT do not
    change which ops the model uses, and minutes of fine-tuning should not precede a
    "this target cannot express node X" that was knowable up front."""
    c = profile.compress
    wanted = req.compress if req.compress is not None else (
        c.prune.enabled or c.qat.enabled or req.prune_ratio is not None or bool(req.qat))
    if not wanted or loaded.torch_model is None:
        return loaded.torch_model, None, None
    from edgesmith.compress.stage import run_compress
    from edgesmith.convert import compat, export

    with events.stage("compat", "before compressing: every node x every target"):
        pre = export.export_onnx(loaded.torch_model, splits.spec.batch_shape(1),
                                 work_dir / "precheck.onnx")
        compat.check(pre, specs).raise_for_unsupported()

    result = run_compress(loaded.torch_model, splits, profile, root / "compress",
                          prune_ratio=req.prune_ratio, qat=req.qat, no_budget=req.no_budget,
                          events=events)
    return result.model, result.qdq_onnx, result.manifest


def run(req: BuildRequest, events: Events | None = None) -> dict[str, Any]:
    """Run a whole build; return the manifest. Raises EdgesmithError subclasses."""
    events = events or Events()
    t_start = time.perf_counter()
    with events.stage("load", "profile, model, data"):
        profile_path = resolve_path(req.profile)
        profile = load_profile(profile_path)
        resolved = stages.resolve_targets(profile, req.targets, str(profile_path))
        loaded = model_mod.load(req.model, arch=req.arch, trust_pickle=req.trust_pickle)
        splits = data_mod.load(req.data, seed=req.seed)
        ref = stages.reference(loaded, splits)
    events.info(f"reference ({ref.source}) top-1 on {len(splits.val_x)} val samples: "
                f"{ref.accuracy * 100:.2f}%")

    with outdir.staging(req.out, on_wait=events.warn) as root, \
            tempfile.TemporaryDirectory(prefix="edgesmith-work-") as work:
        work_dir = Path(work)
        model, qdq_onnx, compress_section = _compress(
            req, loaded, splits, profile, root, events, stages.compat_targets(resolved), work_dir)
        reference_doc = {"source": ref.source, "accuracy": ref.accuracy}
        if compress_section is not None:
            # parity is judged against the compressed model (what the converters were given);
            # accuracy drops stay relative to the original FP32 model, as budgets define them
            compressed = stages.reference(model_mod.LoadedModel(req.model, torch_model=model),
                                          splits)
            ref = stages.Reference(compressed.outputs, ref.accuracy, "torch (compressed)")
            reference_doc.update(parity_against="torch (compressed)",
                                 compressed_accuracy=compressed.accuracy)

        from edgesmith.compress.calibration import from_splits
        from edgesmith.convert import compat, export, optimize

        with events.stage("export", "ONNX opset 17 + graph optimisation"):
            if model is not None:
                raw = export.export_onnx(model, splits.spec.batch_shape(1), work_dir / "raw.onnx")
                torchscript = export.trace_torchscript(model, splits.spec.batch_shape(1),
                                                       work_dir / "model.ts")
            else:
                raw, torchscript = loaded.onnx_path, None
            opt = optimize.optimize(raw, root / "model.onnx", splits.val_x)

        with events.stage("compat", "every node x every target"):
            report_c = compat.check(opt.path, stages.compat_targets(resolved))
            write_json_atomic(root / "compat.json", report_c.to_json())
            report_c.raise_for_unsupported()

        calib = from_splits(splits, profile.compress.calibration, warn=events.warn)
        with events.stage("quantize", "static INT8 QDQ model for the INT8 targets"):
            static_qdq = stages.static_qdq(resolved, opt.path, calib, root, req.use_cache)
        ctx_args = dict(fp32_onnx=opt.path, spec=splits.spec, calib=calib, profile=profile,
                        work_dir=work_dir, torchscript=torchscript, qdq_onnx=qdq_onnx,
                        static_qdq=static_qdq, torch_model=model)
        results = []
        for spec, options in resolved:
            with events.stage(f"target {spec.name}", "convert + validate"):
                r = stages.convert_and_validate(spec, options, ctx_args, splits, ref, root,
                                                use_cache=req.use_cache)
            results.append(r)
            cached = " (from cache)" if r.artifact and r.artifact.meta.get("cached") else ""
            events.info(r.message or f"{spec.name}: ok{cached}")
        misses = stages.check_budgets(results, profile.budgets)

        manifest = {
            "edgesmith_version": __version__,
            "created_unix": int(time.time()),
            "command": " ".join(sys.argv),
            "host": {"machine": platform.machine(), "system": platform.system()},
            "tools": tool_versions(),
            "inputs": {"model": req.model, "arch": req.arch, "data": req.data,
                       "profile": str(profile_path), "seed": req.seed,
                       "sha256": _input_hashes(req, profile_path, splits)},
            "profile": profile.model_dump(mode="json"),
            "input": splits.spec.to_json(),
            "data": splits.summary(),
            "reference": reference_doc,
            "stages": {"export": {"opset": export.DEFAULT_OPSET, "from": loaded.kind},
                       "optimize": opt.summary(), "compat": report_c.counts(),
                       "calibration": calib.summary()},
            "compress": compress_section,
            "bench_data": stages.write_bench_data(root, splits, ref),
            "targets": [r.to_json(root) for r in results],
            "budgets": profile.budgets.model_dump(mode="json"),
            "budget_misses": misses,
            "duration_s": round(time.perf_counter() - t_start, 2),
        }
        write_json_atomic(root / "manifest.json", manifest)
        report.write_report(root)
        outdir.publish(root, req.out)

    try:
        stages.raise_if_failed(results)
        if misses and not req.no_budget:
            raise BudgetError("build outside the profile's budgets:\n  " + "\n  ".join(misses),
                              where=str(req.out),
                              fix="relax budgets in the profile, or pass --no-budget to report")
    except EdgesmithError as e:
        e.manifest = manifest  # published: the CLI still prints the table / JSON summary
        raise
    return manifest


def summary(manifest: dict[str, Any], out: Path) -> dict[str, Any]:
    """The stable ``--json`` document (README "JSON output")."""
    keys = ("name", "format", "precision", "status", "path", "sha256", "size_bytes",
            "accuracy", "reference_accuracy", "accuracy_drop", "parity", "latency_ms_p50",
            "message")
    return {
        "out": str(out),
        "profile": manifest["profile"]["name"],
        "reference": manifest["reference"],
        "targets": [{k: t.get(k) for k in keys} for t in manifest["targets"]],
        "budget_misses": manifest["budget_misses"],
        "compress": manifest.get("compress"),
        "duration_s": manifest["duration_s"],
    }


__all__ = ["BuildRequest", "run", "summary"]
