"""Core ML: an ML Program ``.mlpackage`` from the traced FP32 model, fp32 / fp16 / INT8.

* fp32 / fp16: ``coremltools.convert`` of ``ctx.torchscript`` with that compute precision.
* int8, ``int8_mode="weights"`` (default): the fp16 program, then weight-only
  ``linear_quantize_weights`` (per-channel symmetric int8, ``constexpr_affine_dequantize``);
  activations stay fp16. Runs on Linux.
* int8, ``int8_mode="w8a8"``: weights and activations in int8, calibrated on the shared
  set through ``coremltools.optimize.torch``'s ``LinearQuantizer`` (prepare -> calibrate ->
  finalize -> trace -> convert). It needs the live ``nn.Module``: a TorchScript file cannot
  be prepared (FX tracing needs Python code). The pipeline passes it as
  ``ctx.torch_model``; without it this mode is refused with a clear error.

Prediction needs macOS, so on other hosts ``runner`` returns None and the report says the
artifact was not run here. What can be checked is checked: the saved package is read back
and its spec (inputs, outputs, op types, quantization ops) lands in ``artifact.meta``.
"""

from __future__ import annotations

import contextlib
import json
import platform
import shutil
import uuid
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from edgesmith.artifact import Artifact
from edgesmith.convert import _coreml_numpy
from edgesmith.convert._stages import run_stage
from edgesmith.errors import ConversionError
from edgesmith.target import CompatRule, ConvertContext, Runner, Target

FORMAT = "coreml"
_UNITS = {"all": "ALL", "ane": "CPU_AND_NE", "gpu": "CPU_AND_GPU", "cpu": "CPU_ONLY"}
_PRE_W8A8 = {"iOS15", "iOS16", "macOS12", "macOS13"}
_BY_ACCELERATOR = {"ane": "ane", "npu": "ane", "gpu": "gpu", "none": "cpu"}


class CoreMLOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    deployment_target: Literal["iOS15", "iOS16", "iOS17", "iOS18",
                               "macOS12", "macOS13", "macOS14", "macOS15"] | None = Field(
        None, description="default: iOS16, or iOS17 for W8A8 (its quantize ops need it)")
    compute_units: Literal["all", "ane", "gpu", "cpu"] | None = Field(
        None, description="default: from the profile's device.accelerator (ane/gpu), else all")
    int8_mode: Literal["weights", "w8a8"] = "weights"
    batch: int = Field(1, ge=1, le=4096, description="static batch of the converted input")

    @model_validator(mode="after")
    def _w8a8_needs_ios17(self) -> CoreMLOptions:
        if self.int8_mode == "w8a8" and self.deployment_target in _PRE_W8A8:
            raise ValueError(f"int8_mode w8a8 needs deployment_target iOS17/macOS14 or later "
                             f"(activation quantize ops); got {self.deployment_target}")
        return self

    @property
    def resolved_target(self) -> str:
        return self.deployment_target or ("iOS17" if self.int8_mode == "w8a8" else "iOS16")


class CoreMLTarget(Target):
    format = FORMAT
    precisions = ("fp32", "fp16", "int8")
    Options = CoreMLOptions
    device_runtime = "coremltools (macOS)"
    device_loader = Path(__file__).with_name("coreml_device.py")
    not_runnable_reason = "Core ML prediction needs macOS; converted and spec-checked only"
    # Core ML converts from torch, so these name the ONNX op a torch function exports to;
    # observed with coremltools 9.0 (tests/convert/test_compat_rules.py)
    compat_rules = {
        "Det": CompatRule("unsupported", "coremltools has no converter for torch.linalg.det"),
    }

    def compat(self, op_type: str, attrs: dict[str, Any], precision: str) -> CompatRule:
        if op_type == "Resize" and attrs.get("mode") == "cubic":
            return CompatRule("unsupported", "coremltools cannot convert bicubic upsampling "
                                             "(upsample_bicubic2d); use bilinear")
        if op_type == "Mod" and attrs.get("fmod") == 1:
            return CompatRule("unsupported", "coremltools cannot convert torch.fmod; use "
                                             "torch.remainder")
        return self.compat_rules.get(op_type, self.default_rule)

    def convert(self, ctx: ConvertContext) -> Artifact:
        import coremltools as ct

        precision = ctx.precision
        opts: CoreMLOptions = ctx.options
        if ctx.torchscript is None or not Path(ctx.torchscript).is_file():
            raise ConversionError(
                "no traced TorchScript model to convert (the model could not be traced, "
                "or it was given as ONNX)", where=f"{FORMAT} conversion",
                fix="Core ML converts from torch: give a torch model that torch.jit.trace "
                    "accepts, or drop the coreml target from the profile")
        units = opts.compute_units or _BY_ACCELERATOR.get(_accelerator(ctx.profile), "all")
        shape = (opts.batch, *ctx.spec.shape)
        ctx.out_dir.mkdir(parents=True, exist_ok=True)
        out = ctx.out_dir / "model.mlpackage"
        meta: dict[str, Any] = {"converter": f"coremltools {ct.__version__}",
                                "deployment_target": opts.resolved_target,
                                "compute_units": units, "input_shape": list(shape)}
        with _captured(ctx):
            if precision == "int8" and opts.int8_mode == "w8a8":
                traced = _stage(ctx, "int8 calibration (LinearQuantizer W8A8)",
                                lambda: _w8a8_traced(ctx, shape))
                model = _stage(ctx, "conversion (coremltools.convert)",
                               lambda: _ct_convert(ctx, traced, shape, "fp16", units))
                meta["quantization"] = "W8A8 (weights + activations int8, LinearQuantizer)"
                meta["calibration"] = ctx.calib.summary()
            else:
                import torch

                traced = _stage(ctx, "load TorchScript",
                                lambda: torch.jit.load(str(ctx.torchscript), map_location="cpu"))
                model = _stage(ctx, "conversion (coremltools.convert)",
                               lambda: _ct_convert(ctx, traced, shape,
                                                   "fp32" if precision == "fp32" else "fp16",
                                                   units))
                if precision == "int8":
                    model = _stage(ctx, "int8 weight quantization (linear_quantize_weights)",
                                   lambda: _weights_int8(model))
                    meta["quantization"] = "weight-only int8 (per-channel symmetric)"
            if out.exists():
                shutil.rmtree(out)
            _stage(ctx, "save", lambda: model.save(str(out)))
            _stage(ctx, "deterministic spec", lambda: _reserialize_deterministically(out))
        meta["spec"] = _stage(ctx, "spec check", lambda: check_spec(out, shape, precision,
                                                                     opts.int8_mode))
        ctx.log(f"coreml {precision}: {out} spec={meta['spec']}")
        return Artifact.of(out, FORMAT, precision, **meta)

    def runner(self, artifact: Artifact) -> Runner | None:
        if platform.system() != "Darwin":
            return None
        import coremltools as ct

        model = ct.models.MLModel(str(artifact.path),
                                  compute_units=getattr(ct.ComputeUnit, _UNITS[
                                      artifact.meta.get("compute_units", "all")]))
        batch = int(artifact.meta.get("input_shape", [1])[0])

        def run(x: np.ndarray) -> np.ndarray:
            x = np.asarray(x, dtype=np.float32)
            outs = [next(iter(model.predict({"input": x[i:i + batch]}).values()))
                    for i in range(0, len(x), batch)]
            return np.concatenate(outs).astype(np.float32)

        return run

    def device_bench_spec(self, artifact: Artifact) -> dict[str, Any]:
        spec = super().device_bench_spec(artifact)
        spec["compute_units"] = _UNITS[artifact.meta.get("compute_units", "all")]
        spec["input_shape"] = artifact.meta.get("input_shape")
        return spec


def _ct_convert(ctx: ConvertContext, traced, shape, compute: str, units: str):
    import coremltools as ct

    if _coreml_numpy.install():
        ctx.log("coremltools: int/bool casts patched for numpy >= 2.4 (convert/_coreml_numpy.py)")
    return ct.convert(
        traced,
        inputs=[ct.TensorType(name="input", shape=shape, dtype=np.float32)],
        outputs=[ct.TensorType(name="output", dtype=np.float32)],
        convert_to="mlprogram",
        minimum_deployment_target=getattr(ct.target, ctx.options.resolved_target),
        compute_precision=(ct.precision.FLOAT32 if compute == "fp32"
                           else ct.precision.FLOAT16),
        compute_units=getattr(ct.ComputeUnit, _UNITS[units]),
        skip_model_load=platform.system() != "Darwin",
    )


def _weights_int8(model):
    from coremltools.optimize.coreml import (
        OpLinearQuantizerConfig,
        OptimizationConfig,
        linear_quantize_weights,
    )

    config = OptimizationConfig(global_config=OpLinearQuantizerConfig(
        mode="linear_symmetric", granularity="per_channel", weight_threshold=0))
    return linear_quantize_weights(model, config)


def _w8a8_traced(ctx: ConvertContext, shape):
    """Prepare -> calibrate on the shared set -> finalize -> trace, on the torch side."""
    import copy

    import torch
    from coremltools.optimize.torch.quantization import LinearQuantizer, LinearQuantizerConfig

    module = getattr(ctx, "torch_model", None)
    if module is None:
        raise ConversionError(
            "W8A8 needs the torch nn.Module; only a TorchScript file was given",
            where=f"{FORMAT} int8 calibration",
            fix="LinearQuantizer cannot prepare TorchScript: pass the module "
                "(ConvertContext.torch_model) or use options.int8_mode: weights")
    # milestones: observers on from step 0, fake-quant on from 0, never freeze BN/observers
    config = LinearQuantizerConfig.from_dict({"global_config": {
        "quantization_scheme": "symmetric", "milestones": [0, 0, 10**9, 10**9]}})
    module = copy.deepcopy(module).eval()
    quantizer = LinearQuantizer(module, config)
    example = torch.from_numpy(np.ascontiguousarray(ctx.calib.x[:shape[0]]))
    prepared = quantizer.prepare(example_inputs=(example,), inplace=False)
    quantizer.step()
    prepared.eval()
    with torch.no_grad():
        for batch in ctx.calib.batches(32):
            prepared(torch.from_numpy(np.ascontiguousarray(batch)))
    final = quantizer.finalize(inplace=False).eval()
    # Core ML cannot predict here; the fake-quantized torch model is the closest proxy
    with torch.no_grad():
        x = torch.from_numpy(np.ascontiguousarray(ctx.calib.x[:256]))
        ref, got = module(x).flatten(1), final(x).flatten(1)
        cos = torch.nn.functional.cosine_similarity(ref, got).mean().item()
        ctx.log(f"W8A8 torch-side parity on {len(x)} calibration samples: max_abs_err="
                f"{(ref - got).abs().max().item():.4g} cosine={cos:.6f} top1_agreement="
                f"{(ref.argmax(1) == got.argmax(1)).float().mean().item():.4f}")
    return torch.jit.trace(final, torch.zeros(shape))


def check_spec(path: Path, shape, precision: str, int8_mode: str) -> dict[str, Any]:
    """Read the saved package back and check what can be checked without macOS."""
    import coremltools as ct

    spec = ct.utils.load_spec(str(path))
    ops: dict[str, int] = {}
    for fn in spec.mlProgram.functions.values():
        for block in fn.block_specializations.values():
            for op in block.operations:
                ops[op.type] = ops.get(op.type, 0) + 1

    def io(items):
        return [{"name": f.name, "shape": list(f.type.multiArrayType.shape),
                 "dtype": ct.proto.FeatureTypes_pb2.ArrayFeatureType.ArrayDataType.Name(
                     f.type.multiArrayType.dataType)} for f in items]

    inputs, outputs = io(spec.description.input), io(spec.description.output)
    problems = []
    if spec.WhichOneof("Type") != "mlProgram":
        problems.append("not an ML Program")
    if [i["shape"] for i in inputs] != [list(shape)]:
        problems.append(f"inputs {inputs} do not match {list(shape)}")
    if not outputs:
        problems.append("no outputs")
    if precision == "int8" and not any(k.startswith("constexpr_") for k in ops) and \
            "dequantize" not in ops:
        problems.append("int8 requested but no quantized weights in the program")
    if precision == "int8" and int8_mode == "w8a8" and "quantize" not in ops:
        problems.append("W8A8 requested but no activation quantize ops in the program")
    if problems:
        raise ConversionError("; ".join(problems), where=f"{FORMAT} spec check",
                              fix="the converted program is not what was asked for")
    return {"ok": True, "spec_version": spec.specificationVersion, "inputs": inputs,
            "outputs": outputs, "ops": ops}


def _accelerator(profile: Any) -> str:
    device = getattr(profile, "device", None)
    return getattr(device, "accelerator", "") if device is not None else ""


def _stage(ctx: ConvertContext, stage: str, fn):
    return run_stage(ctx, FORMAT, stage, fn)


@contextlib.contextmanager
def _captured(ctx: ConvertContext):
    """coremltools' progress bars and warnings go to the target's log, not the terminal.
    Its logger stops propagating meanwhile: the root logger's handler would otherwise
    print its ``ERROR -`` lines (a failed graph pass) on the console as well."""
    import logging
    import warnings

    ctx.log_path.parent.mkdir(parents=True, exist_ok=True)
    with ctx.log_path.open("a", encoding="utf-8") as log, \
            contextlib.redirect_stderr(log), warnings.catch_warnings():
        handler = logging.StreamHandler(log)
        lg = logging.getLogger("coremltools")
        lg.addHandler(handler)
        propagate, lg.propagate = lg.propagate, False
        warnings.simplefilter("ignore")
        try:
            yield
        finally:
            lg.removeHandler(handler)
            lg.propagate = propagate


def _reserialize_deterministically(package: Path) -> None:
    """coremltools writes the spec's metadata map in hash order, so two conversions of one
    model differ byte for byte; protobuf's deterministic mode sorts map keys. Same spec,
    same bytes: the artifact's sha256 becomes reproducible."""
    from coremltools.proto import Model_pb2

    path = Path(package) / "Data" / "com.apple.CoreML" / "model.mlmodel"
    spec = Model_pb2.Model()
    spec.ParseFromString(path.read_bytes())
    path.write_bytes(spec.SerializeToString(deterministic=True))
    # the package manifest keys its items by random UUIDs; name each after its path instead
    manifest = Path(package) / "Manifest.json"
    doc = json.loads(manifest.read_text())
    renamed = {old: str(uuid.uuid5(uuid.NAMESPACE_URL, item.get("path", old)))
               for old, item in doc.get("itemInfoEntries", {}).items()}
    doc["itemInfoEntries"] = {renamed[k]: v for k, v in doc["itemInfoEntries"].items()}
    if doc.get("rootModelIdentifier") in renamed:
        doc["rootModelIdentifier"] = renamed[doc["rootModelIdentifier"]]
    manifest.write_text(json.dumps(doc, indent=4, sort_keys=True) + "\n")
