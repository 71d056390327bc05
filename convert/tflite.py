"""TFLite (LiteRT): fp32, fp16 and full-integer INT8, from the optimized ONNX via onnx2tf.

Route: onnx2tf, not litert-torch. onnx2tf starts from the same optimized ONNX every other
target uses (so the compat report speaks for it), runs offline when handed calibration
data, and on the digits demo its full-integer model loses 0.28 pt (99.44 -> 99.16 %).
litert-torch would start from torch instead, but pulls transformers, jax and hub clients
into the environment for no measured accuracy gain (see DESIGN.md traps).

onnx2tf runs in a child process in a throw-away working directory: it writes into its
cwd, fetches sample images over the network unless a synthetic one is there, and prints
a great deal, all of which goes to the target's log. A crash there (a Python error, or
TensorFlow aborting the process) becomes a ``ConversionError`` naming the stage.

TFLite graphs are channels-last. The runner takes the NCHW float32 batch the torch model
takes, transposes it, quantizes it for int8 I/O, and hands back float32 outputs in the
ONNX layout, so validation and users never see the difference.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from edgesmith.artifact import Artifact
from edgesmith.errors import ConversionError
from edgesmith.target import CompatRule, ConvertContext, Runner, Target

FORMAT = "tflite"
# the file onnx2tf fetches unless it is in its cwd (for any 4-D input with 3 channels)
_SAMPLE_FILE = "calibration_image_sample_data_20x128x128x3_float32.npy"
# which onnx2tf output file answers which (precision, io)
_VARIANTS = {
    ("fp32", "float"): "_float32.tflite",
    ("fp16", "float"): "_float16.tflite",
    ("int8", "float"): "_integer_quant.tflite",
    ("int8", "int8"): "_full_integer_quant.tflite",
}

# Runs in the child: argv[1] is a JSON object of onnx2tf.convert keyword arguments.
_CHILD = """
import json, sys
import onnx2tf
onnx2tf.convert(**json.loads(sys.argv[1]))
"""


# Rules observed with onnx2tf 1.28 + ai-edge-litert 2.3 (tests/convert/test_compat_rules.py
# converts a tiny model per rule and checks it): "unsupported" means the conversion fails,
# the model needs the Flex (Select TF ops) delegate the LiteRT builtin interpreter lacks,
# or the converted model computes something else.
_FLEX = "becomes a Select-TF (Flex) op that the builtin LiteRT interpreter cannot run"
_RULES = {
    "Erf": CompatRule("unsupported", f"Erf {_FLEX}; use GELU(approximate='tanh')"),
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


class TFLiteTarget(Target):
    format = FORMAT
    precisions = ("fp32", "fp16", "int8")
    Options = TFLiteOptions
    device_runtime = "ai-edge-litert (or tflite-runtime)"
    device_loader = Path(__file__).with_name("tflite_device.py")
    device_threads_option = "num_threads"
    not_runnable_reason = ""
    compat_rules = _RULES

    def compat(self, op_type: str, attrs: dict[str, Any], precision: str) -> CompatRule:
        if op_type == "Resize" and attrs.get("mode") == "cubic":
            return CompatRule("unsupported", f"cubic Resize {_FLEX}; use linear or nearest")
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
        produced = _onnx2tf_cached(ctx, int8=precision == "int8")
        src = produced / (ctx.fp32_onnx.stem + _VARIANTS[(precision, io)])
        if not src.is_file():
            raise ConversionError(
                f"onnx2tf finished but wrote no {src.name}", where=f"{FORMAT} conversion",
                fix=f"see the full converter output in {ctx.log_path}")
        out = _ensure(ctx.out_dir) / "model.tflite"
        shutil.copyfile(src, out)
        meta: dict[str, Any] = {
            "converter": f"onnx2tf {_version('onnx2tf')}",
            "io": io,
            "num_threads": ctx.options.num_threads,
            "onnx_outputs": _onnx_output_shapes(ctx.fp32_onnx, ctx.calib.x[:1]),
        }
        if precision == "int8":
            meta["calibration"] = ctx.calib.summary()
            if ctx.calib.method != "minmax":
                ctx.log(f"note: TFLite calibrates min/max; method {ctx.calib.method} not applied")
            if ctx.qdq_onnx is not None:
                ctx.log("note: TFLite INT8 is calibrated post-training from the FP32 ONNX; "
                        "the QAT model's scales are not carried over")
        meta.update(_describe(out))
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


# -- onnx2tf in a child process ---------------------------------------------------------------
def _onnx2tf_cached(ctx: ConvertContext, *, int8: bool) -> Path:
    """One onnx2tf run writes every variant (fp32, fp16, and int8 when calibrating), so
    the tflite targets of one build share it through the build's scratch folder."""
    import hashlib

    h = hashlib.sha256(Path(ctx.fp32_onnx).read_bytes())
    h.update(repr(tuple(ctx.spec.shape)).encode())
    base = h.hexdigest()[:16]
    h.update(np.ascontiguousarray(ctx.calib.x).tobytes())
    h.update(repr(ctx.calib.per_channel).encode())
    with_int8 = _ensure(ctx.work_dir) / f"onnx2tf-{h.hexdigest()[:16]}-int8"
    float_only = Path(ctx.work_dir) / f"onnx2tf-{base}-float"
    for done in ([with_int8] if int8 else [with_int8, float_only]):
        if (done / "saved_model").is_dir():
            ctx.log(f"onnx2tf: reusing {done} (same ONNX and calibration set)")
            return done / "saved_model"
    final = with_int8 if int8 else float_only
    work = Path(tempfile.mkdtemp(prefix="onnx2tf-", dir=ctx.work_dir))
    try:
        _run_onnx2tf(ctx, work, int8=int8)
        shutil.rmtree(final, ignore_errors=True)
        (work / "saved_model").rename(_ensure(final) / "saved_model")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return final / "saved_model"


def _run_onnx2tf(ctx: ConvertContext, work: Path, *, int8: bool) -> Path:
    """Run onnx2tf on ``ctx.fp32_onnx``; returns the folder holding its .tflite files."""
    out_dir = work / "saved_model"
    cwd = work / "cwd"
    cwd.mkdir()
    np.save(cwd / _SAMPLE_FILE, np.zeros((20, 128, 128, 3), np.float32))
    input_name = _input_name(ctx.fp32_onnx)
    kwargs: dict[str, Any] = {
        "input_onnx_file_path": str(_static_batch(ctx, _ensure(work / "static"))),
        "output_folder_path": str(out_dir),
        # the export has a dynamic batch axis; TFLite wants every shape static, and
        # batch_size=1 alone leaves symbolic dims in some ops (ConvTranspose, Reshape)
        "overwrite_input_shape": [f"{input_name}:{','.join(map(str, (1, *ctx.spec.shape)))}"],
        "copy_onnx_input_output_names_to_tflite": True,
        "verbosity": "info",
    }
    if int8:
        calib = work / "calib_nhwc.npy"
        np.save(calib, ctx.calib.nhwc().astype(np.float32))
        # the shared set is already normalised: mean 0, std 1 leaves it as it is
        kwargs.update(
            output_integer_quantized_tflite=True,
            quant_type="per-channel" if ctx.calib.per_channel else "per-tensor",
            custom_input_op_name_np_data_path=[[input_name, str(calib), 0.0, 1.0]],
        )
    ctx.log(f"$ onnx2tf {json.dumps(kwargs)}")
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": "-1",
           "PYTHONUNBUFFERED": "1"}
    stage = f"{FORMAT} conversion (onnx2tf{', int8 calibration' if int8 else ''})"
    ctx.log_path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with ctx.log_path.open("a", encoding="utf-8") as log:
            proc = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(kwargs)], cwd=cwd,
                                  env=env, stdout=log, stderr=subprocess.STDOUT,
                                  timeout=ctx.options.timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise ConversionError(f"onnx2tf did not finish within {ctx.options.timeout_s:g} s",
                              where=stage, fix=f"see {ctx.log_path}; raise options.timeout_s "
                                               "for very large models") from None
    if proc.returncode != 0:
        raise ConversionError(
            f"onnx2tf failed (exit status {proc.returncode}): {_last_error(ctx.log_path)}",
            where=stage,
            fix=f"full converter output in {ctx.log_path}; if an op is to blame, check "
                "`edgesmith inspect` and replace it or drop the tflite target")
    return out_dir


def _last_error(log_path: Path) -> str:
    """The most telling line of a failed run: the last exception line, else the last line."""
    lines = [ln.strip() for ln in log_path.read_text(errors="replace").splitlines() if ln.strip()]
    for ln in reversed(lines):
        if "Error" in ln or "error" in ln or "Exception" in ln:
            return _strip_ansi(ln)[:300]
    return _strip_ansi(lines[-1])[:300] if lines else "(no output)"


def _strip_ansi(s: str) -> str:
    import re

    return re.sub(r"\x1b\[[0-9;]*m", "", s)


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


def _static_batch(ctx: ConvertContext, folder: Path) -> Path:
    """A copy with batch 1 everywhere, re-simplified: onnx2tf reads declared output and
    value_info shapes (a symbolic batch left there breaks ConvTranspose), and constant
    shape arithmetic that only folds once the batch is known breaks its Reshape handling.
    onnx2tf's own simplifier (the onnxsim CLI) is not installed; onnxslim is."""
    import onnx

    out = folder / Path(ctx.fp32_onnx).name  # onnx2tf names its outputs after this stem
    model = onnx.load(str(ctx.fp32_onnx))
    for value in [*model.graph.input, *model.graph.output]:
        dims = value.type.tensor_type.shape.dim
        if len(dims) and not dims[0].HasField("dim_value"):
            dims[0].Clear()
            dims[0].dim_value = 1
    for value in model.graph.output:  # let inference fill the rest from the static input
        for d in value.type.tensor_type.shape.dim[1:]:
            if not d.HasField("dim_value"):
                d.Clear()
    del model.graph.value_info[:]
    model = onnx.shape_inference.infer_shapes(model)
    try:
        import onnxslim

        model = onnxslim.slim(model)
    except Exception as e:  # simplification is an aid, not a requirement
        ctx.log(f"note: onnxslim on the static-batch copy failed ({e}); using it unsimplified")
    onnx.save(model, str(out))
    return out


def _input_name(onnx_path: Path) -> str:
    import onnx

    return onnx.load(str(onnx_path), load_external_data=False).graph.input[0].name


def _version(dist: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return "unknown"


def _ensure(p: Path) -> Path:
    Path(p).mkdir(parents=True, exist_ok=True)
    return Path(p)

