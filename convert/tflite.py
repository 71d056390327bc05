"""TFLite (LiteRT): fp32, fp16 and full-integer INT8, from the optimized ONNX via onnx2tf.

Route: onnx2tf, not litert-torch. onnx2tf starts from the same optimized ONNX every other
target uses (so the compat report speaks for it), runs offline when handed calibration
data, and on the digits demo its full-integer model loses 0.28 pt (99.44 -> 99.16 %).
litert-torch would start from torch instead, but pulls transformers, jax and hub clients
into the environment for no measured accuracy gain (see DESIGN.md traps).

onnx2tf runs in a child process (``_onnx2tf.py``: its working directory, environment,
executables, and what a crash there becomes: a ``ConversionError`` naming the stage, the
signal and the step, never a crash of the build).

INT8 layers in float (``float_nodes``, filled by the accuracy-aware fallback): onnx2tf's run
keeps the calibrated float model TensorFlow quantizes its INT8 output from; TensorFlow's
MLIR quantizer then quantizes it again with the ops computing those ONNX nodes denylisted
(``denylisted_nodes``, what ``tf.lite.experimental.QuantizationDebugger`` uses for selective
quantization), without a second calibration. onnx2tf does not keep ONNX node names, so which
TFLite ops compute a node is found by matching tensor values (``_tflite_select.py``).

TFLite graphs are channels-last. The runner takes the NCHW float32 batch the torch model
takes, transposes it, quantizes it for int8 I/O, and hands back float32 outputs in the
ONNX layout, so validation and users never see the difference.
"""

from __future__ import annotations

import functools
import shutil
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from edgesmith.artifact import Artifact
from edgesmith.convert import _onnx2tf, _tflite_select
from edgesmith.convert.compat import IN_EXACT_GELU
from edgesmith.errors import ConversionError
from edgesmith.target import CompatRule, ConvertContext, Runner, Target

FORMAT = "tflite"
# which onnx2tf output file answers which (precision, io)
_VARIANTS = {
    ("fp32", "float"): "float32",
    ("fp16", "float"): "float16",
    ("int8", "float"): "integer_quant",
    ("int8", "int8"): "full_integer_quant",
}

# Rules observed with onnx2tf 1.28 + ai-edge-litert 2.3 (tests/convert/test_compat_rules.py
# converts a tiny model per rule and checks it): "unsupported" means the conversion fails,
# the model needs the Flex (Select TF ops) delegate the LiteRT builtin interpreter lacks,
# or the converted model computes something else.
_FLEX = "becomes a Select-TF (Flex) op that the builtin LiteRT interpreter cannot run"
_RULES = {
    "Erf": CompatRule("lowered", "an exact GELU's Erf becomes TFLite's GELU; any other Erf "
                                 "becomes float arithmetic (|error| <= 1.5e-7) whose division "
                                 "int8 cannot run: use nn.GELU()"),
    "Einsum": CompatRule("unsupported", "onnx2tf's Einsum gives wrong results after its "
                                        "NHWC transposition; rewrite it as MatMul/Transpose"),
    "CumSum": CompatRule("unsupported", "onnx2tf does not remap the CumSum axis to NHWC: "
                                        "wrong results"),
    "GridSample": CompatRule("unsupported", "onnx2tf's GridSample lowering gives wrong results"),
    "Det": CompatRule("unsupported", "onnx2tf cannot convert Det (tf.linalg.det fails)"),
    "InstanceNormalization": CompatRule("lowered", "decomposed into mean/variance arithmetic"),
    "Hardmax": CompatRule("unsupported", "onnx2tf's Hardmax gives wrong results (cosine 0.26 "
                                         "vs onnxruntime); use ArgMax + OneHot"),
    "Trilu": CompatRule("unsupported", "onnx2tf's Trilu gives wrong results after its NHWC "
                                       "transposition"),
}


@functools.cache
def _onnx2tf_has_op(op_type: str) -> bool:
    """onnx2tf implements each ONNX op as a module ``onnx2tf/ops/<OpType>.py``; an op without
    one fails the conversion (e.g. DFT: "No module named 'onnx2tf.ops.DFT'"). Looked up on
    disk: importing onnx2tf would import TensorFlow just to answer the compat question."""
    import importlib.util

    spec = importlib.util.find_spec("onnx2tf")
    if spec is None or not spec.origin:
        return True  # not installed here: the conversion itself will say so
    return (Path(spec.origin).parent / "ops" / f"{op_type}.py").is_file()



class TFLiteOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    io: Literal["float", "int8"] = Field(
        "float", description="int8 only: float32 I/O (quantize inside) or int8 I/O tensors")
    num_threads: int = Field(1, ge=1, le=256, description="XNNPACK threads when run")
    timeout_s: float = Field(900.0, gt=0, description="limit for the onnx2tf child process")
    float_nodes: list[str] = Field(
        default_factory=list,
        description="int8 only: ONNX node names whose TFLite ops stay in float (TensorFlow's "
                    "denylisted_nodes); the accuracy-aware fallback fills it")


class TFLiteTarget(Target):
    format = FORMAT
    precisions = ("fp32", "fp16", "int8")
    Options = TFLiteOptions
    device_runtime = "ai-edge-litert (or tflite-runtime)"
    device_loader = Path(__file__).with_name("tflite_device.py")
    device_threads_option = "num_threads"
    not_runnable_reason = ""
    compat_rules = _RULES
    # percentile: TensorFlow's min/max calibration, then each activation's range narrowed to
    # the percentile of its |values| before the MLIR quantizer derives scales from it
    range_methods = ("minmax", "percentile")

    def compat(self, op_type: str, attrs: dict[str, Any], precision: str) -> CompatRule:
        if op_type == "Resize" and attrs.get("mode") == "cubic":
            return CompatRule("unsupported", f"cubic Resize {_FLEX}; use linear or nearest")
        if op_type == "Erf" and precision == "int8" and attrs.get(IN_EXACT_GELU) is False:
            return CompatRule("unsupported", "an Erf outside an exact GELU (Div -> Erf -> Add "
                                             "-> Mul -> Mul) becomes float arithmetic whose "
                                             "quantized division LiteRT cannot run: use "
                                             "nn.GELU() if it is one, else build this target "
                                             "as fp32/fp16 or drop it")
        if op_type == "Mod" and attrs.get("fmod") == 1:
            return CompatRule("unsupported", "fmod=1 (C-style remainder) is converted as Python "
                                             "modulo: wrong sign for negative inputs")
        rule = self.compat_rules.get(op_type)
        if rule is not None:
            return rule
        if not _onnx2tf_has_op(op_type):
            return CompatRule("unsupported", f"onnx2tf has no converter for {op_type}")
        return self.default_rule

    # -- convert ---------------------------------------------------------------------------
    def convert(self, ctx: ConvertContext) -> Artifact:
        precision = ctx.precision
        io = ctx.options.io if precision == "int8" else "float"
        if precision == "int8" and ctx.options.float_nodes:
            _tflite_select.check_nodes(ctx.fp32_onnx, list(ctx.options.float_nodes))
        produced = _convert_shared(ctx, precision, io)
        src = produced / f"{ctx.fp32_onnx.stem}_{_VARIANTS[(precision, io)]}.tflite"
        if not src.is_file():
            raise ConversionError(
                f"onnx2tf finished but wrote no {src.name}", where=f"{FORMAT} conversion",
                fix=f"see the full converter output in {ctx.log_path}")
        out = _ensure(ctx.out_dir) / "model.tflite"
        kept = _requantized(ctx, produced, out, io) if precision == "int8" and \
            (ctx.options.float_nodes or ctx.calib.method == "percentile") else None
        if kept is None:
            shutil.copyfile(src, out)
        meta: dict[str, Any] = {
            "converter": f"onnx2tf {_version('onnx2tf')}",
            "io": io,
            "num_threads": ctx.options.num_threads,
            "onnx_outputs": _onnx_output_shapes(ctx.fp32_onnx, ctx.calib.x[:1]),
        }
        if kept:
            meta["float_nodes"] = list(ctx.options.float_nodes)
            meta["float_ops"] = kept  # ONNX node -> the TFLite tensors left in float
        if precision == "int8":
            meta["calibration"] = ctx.calib.summary()
            if ctx.calib.method not in self.range_methods:
                ctx.log(f"note: TFLite calibrates min/max or percentile ranges; method "
                        f"{ctx.calib.method} not applied (min/max used)")
            if ctx.qdq_onnx is not None:
                ctx.log("note: TFLite INT8 is calibrated post-training from the FP32 ONNX; "
                        "the QAT model's scales are not carried over")
        meta.update(_describe(out))
        if precision == "int8":
            _check_calibrated_layout(ctx, meta["inputs"])
        ctx.log(f"tflite {precision} io={io}: {out} inputs={meta['inputs']} "
                f"outputs={meta['outputs']}")
        return Artifact.of(out, FORMAT, precision, **meta)

    # -- run --------------------------------------------------------------------------------
    def runner(self, artifact: Artifact) -> Runner:
        from ai_edge_litert.interpreter import Interpreter

        interp = Interpreter(str(artifact.path),
                             num_threads=int(artifact.meta.get("num_threads", 1)))
        interp.allocate_tensors()
        inp = interp.get_input_details()[0]
        out = interp.get_output_details()[0]
        model_batch = int(inp["shape"][0])
        onnx_out = artifact.meta.get("onnx_outputs") or [None]
        onnx_out_shape = onnx_out[0]

        def one(x: np.ndarray) -> np.ndarray:
            interp.set_tensor(inp["index"], _quantize(_to_tflite_layout(x, inp["shape"]), inp))
            interp.invoke()
            y = _dequantize(interp.get_tensor(out["index"]), out)
            return _to_onnx_layout(y, onnx_out_shape)

        def run(x: np.ndarray) -> np.ndarray:
            x = np.asarray(x, dtype=np.float32)
            if len(x) == model_batch:
                return one(x)
            parts = [one(x[i:i + model_batch]) for i in range(0, len(x), model_batch)]
            return np.concatenate(parts) if parts else np.zeros((0,), np.float32)

        return run

    def device_bench_spec(self, artifact: Artifact) -> dict[str, Any]:
        spec = super().device_bench_spec(artifact)
        spec["io"] = artifact.meta.get("io", "float")
        spec["layout"] = "NHWC"  # what the .tflite takes; the bench transposes NCHW inputs
        spec["inputs"] = artifact.meta.get("inputs", [])
        spec["outputs"] = artifact.meta.get("outputs", [])
        return spec


def _requantized(ctx: ConvertContext, produced: Path, out: Path,
                 io: str) -> dict[str, list[str]]:
    """Write to ``out`` the INT8 model with the ops of ``options.float_nodes`` in float
    and, for ``calibration.method: percentile``, percentile activation ranges: onnx2tf's
    calibrated model quantized again by TensorFlow with those ops denylisted (no second
    calibration run). Returns which TFLite tensors each ONNX node became; checks that
    every one of them really is float in the result."""
    calibrated = produced / f"{ctx.fp32_onnx.stem}_{_onnx2tf.CALIBRATED}.tflite"
    if not calibrated.is_file():
        raise ConversionError("onnx2tf's run kept no calibrated model to requantize",
                              where=f"{FORMAT} int8 fallback",
                              fix="rebuild with --force, or build with --no-fallback")
    x = ctx.calib.x
    mapping = _tflite_select.float_tensors(ctx.fp32_onnx, calibrated,
                                           list(ctx.options.float_nodes), x,
                                           _onnx2tf.channels_last(x)) \
        if ctx.options.float_nodes else {}
    names = sorted({t for ts in mapping.values() for t in ts})
    _onnx2tf.requantize(ctx, calibrated, out, io, names, ctx.calib.percentile
                        if ctx.calib.method == "percentile" else None)
    dtypes = _output_dtypes(out)
    still = [t for t in names if dtypes.get(t, "float32") != "float32"]
    if still:
        raise ConversionError(f"TensorFlow left {still[0]!r} quantized although it was "
                              f"denylisted", where=f"{FORMAT} int8 fallback",
                              fix="build with --no-fallback to keep the plain INT8 model")
    ctx.log(f"tflite int8: kept in float {mapping}")
    return mapping


def _output_dtypes(path: Path) -> dict[str, str]:
    """Each op output tensor's dtype, by name."""
    from ai_edge_litert.interpreter import Interpreter

    interp = Interpreter(str(path))
    return {t["name"]: np.dtype(t["dtype"]).name for t in interp.get_tensor_details()}


def _convert_shared(ctx: ConvertContext, precision: str, io: str) -> Path:
    """onnx2tf's folder for this target, from the run shared by the profile's tflite
    targets; when that run fails (INT8 calibration crashing, say), this target is
    converted alone, so a float target does not fail for an INT8 one's fault."""
    own = frozenset({"float32", _VARIANTS[(precision, io)]})
    wanted = _variants_wanted(ctx, precision, io)
    try:
        return _onnx2tf.converted(ctx, wanted)
    except ConversionError as e:
        if wanted == own:
            raise
        ctx.log(f"note: the onnx2tf run for {', '.join(sorted(wanted))} failed ({e.what}); "
                f"converting {ctx.target.name} alone")
        return _onnx2tf.converted(ctx, own)


def _variants_wanted(ctx: ConvertContext, precision: str, io: str) -> frozenset[str]:
    """The onnx2tf variants every tflite target of the profile takes, this one included:
    one onnx2tf run (TensorFlow started once, the graph converted once) then serves them
    all, instead of one run per target. float32 is always among them: onnx2tf writes it
    first, whatever else is asked."""
    wanted = {"float32", _VARIANTS[(precision, io)]}
    for spec in (ctx.profile.targets if ctx.profile is not None else []):
        if spec.format.value != FORMAT:
            continue
        try:
            opts = TFLiteOptions(**spec.options)
        except ValueError:
            continue  # refused when that target itself is resolved
        p = spec.precision.value
        if (p, opts.io if p == "int8" else "float") in _VARIANTS:
            wanted.add(_VARIANTS[(p, opts.io if p == "int8" else "float")])
    return frozenset(wanted)


# -- layout and quantization of I/O ------------------------------------------------------------
def _to_tflite_layout(x: np.ndarray, shape) -> np.ndarray:
    """NCHW (or NCL) -> channels-last, when that is what the interpreter's input is."""
    if x.ndim >= 3 and tuple(x.shape[1:]) != tuple(shape[1:]):
        moved = np.moveaxis(x, 1, -1)
        if tuple(moved.shape[1:]) == tuple(shape[1:]):
            return np.ascontiguousarray(moved)
    return x


def _to_onnx_layout(y: np.ndarray, onnx_shape) -> np.ndarray:
    if onnx_shape is None or y.ndim < 3 or tuple(y.shape[1:]) == tuple(onnx_shape[1:]):
        return y
    moved = np.moveaxis(y, -1, 1)
    return np.ascontiguousarray(moved) if tuple(moved.shape[1:]) == tuple(onnx_shape[1:]) else y


def _quantize(x: np.ndarray, detail: dict) -> np.ndarray:
    dtype = detail["dtype"]
    if dtype in (np.int8, np.uint8, np.int16):
        scale, zero = detail["quantization"]
        info = np.iinfo(dtype)
        return np.clip(np.round(x / scale + zero), info.min, info.max).astype(dtype)
    return x.astype(dtype, copy=False)


def _dequantize(y: np.ndarray, detail: dict) -> np.ndarray:
    if detail["dtype"] in (np.int8, np.uint8, np.int16):
        scale, zero = detail["quantization"]
        return ((y.astype(np.float32) - zero) * scale).astype(np.float32)
    return np.asarray(y, dtype=np.float32)


# -- small helpers --------------------------------------------------------------------------
def _describe(path: Path) -> dict[str, Any]:
    """Input/output tensors and builtin op counts of a .tflite, for the manifest."""
    from ai_edge_litert.interpreter import Interpreter

    interp = Interpreter(str(path))

    def tensors(details):
        return [{"name": d["name"], "shape": [int(v) for v in d["shape"]],
                 "dtype": np.dtype(d["dtype"]).name,
                 "quantization": [float(d["quantization"][0]), int(d["quantization"][1])]}
                for d in details]

    ops: dict[str, int] = {}
    try:
        for op in interp._get_ops_details():  # noqa: SLF001 - the only op listing offered
            ops[op["op_name"]] = ops.get(op["op_name"], 0) + 1
    except Exception:  # pragma: no cover - listing ops is informational
        pass
    return {"inputs": tensors(interp.get_input_details()),
            "outputs": tensors(interp.get_output_details()), "ops": ops}


def _onnx_output_shapes(onnx_path: Path, sample: np.ndarray) -> list[list[int]]:
    import onnxruntime as ort

    sess = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    outs = sess.run(None, {sess.get_inputs()[0].name: np.asarray(sample, np.float32)})
    return [list(o.shape) for o in outs]


def _check_calibrated_layout(ctx: ConvertContext, inputs: list[dict[str, Any]]) -> None:
    """The calibration samples were fed channels-last; a TFLite input of another shape
    means they were not the tensors the model takes, and its scales would be made up."""
    fed = list(_onnx2tf.channels_last(ctx.calib.x[:1]).shape[1:])
    got = inputs[0]["shape"][1:] if inputs else fed
    if list(got) != fed:
        raise ConversionError(
            f"onnx2tf's TFLite input is {inputs[0]['shape']}, but the calibration samples "
            f"were laid out as [N, {', '.join(map(str, fed))}]", where=f"{FORMAT} int8 "
            "calibration", fix="report the model: onnx2tf chose an input layout edgesmith "
                               "does not expect; the fp32/fp16 tflite targets are unaffected")


def _version(dist: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return "unknown"


def _ensure(p: Path) -> Path:
    Path(p).mkdir(parents=True, exist_ok=True)
    return Path(p)

