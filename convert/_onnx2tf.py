"""onnx2tf in a child process: the TFLite target's converter run, kept apart from the target.

onnx2tf runs in a throw-away working directory: it writes into its cwd, fetches sample
images over the network unless a synthetic one is there, and prints a great deal, all of
which goes to the target's log. A crash there (a Python error, or TensorFlow aborting or
segfaulting the process) becomes a ``ConversionError`` naming the stage and, for a crash,
the signal and the step onnx2tf had reached; the build process itself never goes down.

What onnx2tf runs besides Python: the ``onnxsim`` executable (pip package ``onnxsim``),
looked up on the child's PATH with this interpreter's bin folder first, so a venv that is
not activated still provides it. Without it onnx2tf would log a FileNotFoundError and go
on; we say so once and skip that step instead (the graph was already simplified with
onnxslim, see ``static_batch``).

Recurrent layers (GRU/LSTM/RNN) are unrolled over time (``enable_rnn_unroll``): as TFLite
WHILE loops, TensorFlow's INT8 calibrator segfaults on them (tensorflow#62281, #75140,
since TF 2.14); unrolled, the same model calibrates and runs.

Named with a leading underscore so the target registry's discovery skips it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from edgesmith.convert._onnx_gelu import mark_exact_gelus
from edgesmith.errors import ConversionError
from edgesmith.target import ConvertContext

FORMAT = "tflite"
# the file onnx2tf fetches unless it is in its cwd (for any 4-D input with 3 channels)
SAMPLE_FILE = "calibration_image_sample_data_20x128x128x3_float32.npy"
ONNXSIM = "onnxsim"  # onnx2tf's simplifier: an executable from the pip package of that name
UNROLL_RNN = True  # GRU/LSTM/RNN as unrolled ops, not WHILE loops (see the module docstring)

# Runs in the child: argv[1] is a JSON object {"kwargs": onnx2tf.convert keyword arguments,
# "keep": the onnx2tf variants to write (float32, float16, integer_quant, ...)}.
# onnx2tf 1.28 has no option to choose its outputs: it always converts float32 and float16,
# and with INT8 on also dynamic-range, integer, full-integer and two int16-activation
# models, four of them calibrated on every sample. Each TFLite conversion it does not need
# is answered with the previous result instead (its file is deleted afterwards), so one run
# costs the graph conversion, float32 and the INT8 variant(s) asked for.
_CHILD = """
import json, pathlib, sys
import tensorflow as tf
from tensorflow.lite.python import lite
import onnx2tf

args = json.loads(sys.argv[1])
keep = set(args["keep"])
last = []

def variant(c):
    ops = set(c.target_spec.supported_ops)
    if tf.lite.OpsSet.EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8 in ops:
        return "int16_act"
    if c.representative_dataset is not None:
        io = c.inference_input_type
        return "full_integer_quant" if io in (tf.int8, tf.uint8) else "integer_quant"
    if tf.float16 in set(c.target_spec.supported_types):
        return "float16"
    return "dynamic_range_quant" if c.optimizations else "float32"

def wrap(cls):
    real = cls.convert
    def convert(self):
        v = variant(self)
        if last and v not in keep:
            print(f"edgesmith: skipped onnx2tf's {v} TFLite conversion (not asked for)")
            return last[-1]
        out = real(self)
        last.append(out)
        return out
    cls.convert = convert

wrap(lite.TFLiteConverterV2)
wrap(lite.TFLiteSavedModelConverterV2)
kwargs = args["kwargs"]
stem = pathlib.Path(kwargs["input_onnx_file_path"]).stem
out_dir = pathlib.Path(kwargs["output_folder_path"])
quantize = lite._mlir_quantize

def keep_calibrated(calibrated, *a, **k):
    # the first INT8 conversion's calibrated float model: requantize() makes the INT8
    # model again from it with chosen ops left in float, without calibrating again
    path = out_dir / f"{stem}_calibrated.tflite"
    if "calibrated" in keep and not path.exists():
        path.write_bytes(calibrated)
    return quantize(calibrated, *a, **k)

lite._mlir_quantize = keep_calibrated
onnx2tf.convert(**kwargs)
for f in out_dir.glob(stem + "_*.tflite"):
    if f.name[len(stem) + 1:-len(".tflite")] not in keep:
        f.unlink()
"""
# Runs in a child as well: argv[1] is {"calibrated", "out", "io", "per_channel", "nodes",
# "percentile", "samples"}. TensorFlow's own selective quantization (what
# tf.lite.experimental.QuantizationDebugger's get_nondebug_quantized_model does): the
# calibrated model quantized as onnx2tf's INT8 conversion quantizes it, except the ops whose
# output tensors are in "nodes". With "percentile", each activation's min/max range stored
# by the calibration is first narrowed to the percentile of its absolute values
# (``PERCENTILE_CHILD``), so a handful of outliers no longer sets its scale.
PERCENTILE_BINS = 4096  # histogram bins of |x| per tensor (onnxruntime's uses 2048)
_REQUANTIZE = """
import json, pathlib, sys
import numpy as np
import tensorflow as tf
from tensorflow.lite.python import convert
from tensorflow.lite.tools import flatbuffer_utils as fu

def activation_stats(model):
    # tensor index -> its QuantizationParameters, for the per-tensor min/max the
    # calibration stored on every activation (constants carry data and no such range)
    sg = model.subgraphs[0]
    out = {}
    for i, t in enumerate(sg.tensors):
        q = t.quantization
        data = model.buffers[t.buffer].data if t.buffer < len(model.buffers) else None
        if q is not None and q.min is not None and len(q.min) == 1 and data is None:
            out[i] = q
    return out

def percentile_ranges(calibrated, samples, percentile, bins):
    model = fu.read_model_from_bytearray(bytearray(calibrated))
    stats = activation_stats(model)
    top = {i: max(abs(float(q.min[0])), abs(float(q.max[0])), 1e-30) for i, q in stats.items()}
    hist = {i: np.zeros(bins, np.int64) for i in stats}
    interp = tf.lite.Interpreter(
        model_content=bytes(calibrated), experimental_preserve_all_tensors=True,
        experimental_op_resolver_type=tf.lite.experimental.OpResolverType
        .BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    interp.allocate_tensors()
    inp = interp.get_input_details()[0]
    batch = int(inp["shape"][0])
    for k in range(0, len(samples) - batch + 1, batch):
        interp.set_tensor(inp["index"], samples[k:k + batch].astype(np.float32))
        interp.invoke()
        for i in stats:
            v = np.abs(interp.get_tensor(i).astype(np.float32).ravel())
            hist[i] += np.histogram(np.minimum(v, top[i]), bins=bins, range=(0, top[i]))[0]
    changed = 0
    for i, q in stats.items():
        total = hist[i].sum()
        if total == 0:
            continue
        cut = int(np.searchsorted(np.cumsum(hist[i]) / total, percentile / 100.0))
        t = top[i] * min(cut + 1, bins) / bins
        lo, hi = max(float(q.min[0]), -t), min(float(q.max[0]), t)
        if (lo, hi) != (float(q.min[0]), float(q.max[0])):
            changed += 1
        q.min, q.max = [lo], [hi]
    print(f"edgesmith: percentile {percentile}: {changed} of {len(stats)} activation "
          f"ranges narrowed on {len(samples) // batch} samples")
    return bytes(fu.convert_object_to_bytearray(model))

a = json.loads(sys.argv[1])
io = tf.int8 if a["io"] == "int8" else tf.float32
calibrated = pathlib.Path(a["calibrated"]).read_bytes()
if a.get("percentile") is not None:
    calibrated = percentile_ranges(calibrated, np.load(a["samples"]), a["percentile"],
                                   a["bins"])
model = convert.mlir_quantize(calibrated,
                              disable_per_channel=not a["per_channel"],
                              input_data_type=io, output_data_type=io,
                              denylisted_nodes=a["nodes"] or None)
pathlib.Path(a["out"]).write_bytes(model)
"""
CALIBRATED = "calibrated"  # the variant name of the calibrated float model onnx2tf's run keeps
# onnx2tf's progress lines, in the order it reaches them: the last one in a crashed run's
# log says which step the crash cut short
_STEPS = [
    ("Model optimizing started", "simplifying the graph"),
    ("Model conversion started", "converting the ONNX ops"),
    ("saved_model output started", "writing the saved model"),
    ("saved_model output complete", "writing the float TFLite models"),
    ("Dynamic Range Quantization tflite output complete", "INT8 calibration"),
    ("INT8 Quantization tflite output complete", "writing the INT8 models"),
]


def converted(ctx: ConvertContext, keep: frozenset[str]) -> Path:
    """The folder of onnx2tf's .tflite files for ``ctx.fp32_onnx``, holding at least the
    variants in ``keep`` (onnx2tf's file suffixes: ``float32``, ``integer_quant``, ...).
    One run writes every variant asked for, so the tflite targets of one build share it
    through the build's scratch folder: the caller asks for all of them at once."""
    int8 = any("integer" in v for v in keep)
    if int8:
        keep = keep | {CALIBRATED}
    h = hashlib.sha256(Path(ctx.fp32_onnx).read_bytes())
    h.update(repr(tuple(ctx.spec.shape)).encode())
    base = h.hexdigest()[:16]
    h.update(np.ascontiguousarray(ctx.calib.x).tobytes())
    h.update(repr(ctx.calib.per_channel).encode())
    with_int8 = _ensure(ctx.work_dir) / f"onnx2tf-{h.hexdigest()[:16]}-int8"
    float_only = Path(ctx.work_dir) / f"onnx2tf-{base}-float"
    stem = Path(ctx.fp32_onnx).stem
    for done in ([with_int8] if int8 else [with_int8, float_only]):
        if all((done / "saved_model" / f"{stem}_{v}.tflite").is_file() for v in keep):
            ctx.log(f"onnx2tf: reusing {done} (same ONNX and calibration set)")
            return done / "saved_model"
    final = with_int8 if int8 else float_only
    work = Path(tempfile.mkdtemp(prefix="onnx2tf-", dir=ctx.work_dir))
    try:
        _run(ctx, work, keep)
        shutil.rmtree(final, ignore_errors=True)
        (work / "saved_model").rename(_ensure(final) / "saved_model")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return final / "saved_model"


def requantize(ctx: ConvertContext, calibrated: Path, out: Path, io: str,
               float_tensors: list[str], percentile: float | None = None) -> Path:
    """``out``: the INT8 model quantized from onnx2tf's ``calibrated`` model with the ops
    writing ``float_tensors`` left in float (TensorFlow's ``denylisted_nodes``), in a child
    process as onnx2tf itself runs. ``percentile``: its activation ranges narrowed to that
    percentile of the calibration samples' absolute values first (no new calibration run:
    the samples go through the calibrated float model once)."""
    args: dict[str, Any] = {"calibrated": str(calibrated), "out": str(out), "io": io,
                            "per_channel": bool(ctx.calib.per_channel), "nodes": float_tensors,
                            "percentile": percentile, "bins": PERCENTILE_BINS}
    what = "ops kept in float" if percentile is None else f"percentile {percentile:g} ranges"
    stage = f"{FORMAT} int8 requantization ({what})"
    undo = "build with --no-fallback to keep the plain INT8 model" if percentile is None \
        else "set calibration.method: minmax in the profile"
    with tempfile.TemporaryDirectory(prefix="requantize-", dir=_ensure(ctx.work_dir)) as tmp:
        if percentile is not None:  # the samples as the TFLite input takes them
            args["samples"] = str(Path(tmp) / "calib_channels_last.npy")
            np.save(args["samples"], channels_last(ctx.calib.x).astype(np.float32))
        ctx.log(f"$ tflite requantize {json.dumps(args)}")
        with ctx.log_path.open("a", encoding="utf-8") as log:
            try:
                proc = subprocess.run([sys.executable, "-c", _REQUANTIZE, json.dumps(args)],
                                      env=child_env(), stdout=log, stderr=subprocess.STDOUT,
                                      timeout=ctx.options.timeout_s, check=False)
            except subprocess.TimeoutExpired:
                raise ConversionError(f"requantization did not finish within "
                                      f"{ctx.options.timeout_s:g} s", where=stage,
                                      fix=f"see {ctx.log_path}") from None
    if proc.returncode != 0 or not out.is_file():
        raise ConversionError(f"TensorFlow's requantization failed (exit status "
                              f"{proc.returncode}): {last_error(ctx.log_path)}", where=stage,
                              fix=f"full output in {ctx.log_path}; {undo}")
    return out


def channels_last(x: np.ndarray) -> np.ndarray:
    """Samples in the layout onnx2tf gives the TFLite input: the channel axis moved last
    for every input of rank 3 or more (NCL -> NLC as well as NCHW -> NHWC). Calibration
    data in the ONNX layout would be fed to a tensor of another shape."""
    return np.ascontiguousarray(np.moveaxis(x, 1, -1)) if x.ndim >= 3 else x


def child_env() -> dict[str, str]:
    """The child's environment: this interpreter's bin folder first on PATH (a venv run
    as ``.venv/bin/edgesmith`` is not activated), TensorFlow quiet and on the CPU."""
    bin_dir = str(Path(sys.executable).parent)
    path = os.pathsep.join([bin_dir, *[p for p in os.environ.get("PATH", "").split(os.pathsep)
                                       if p and p != bin_dir]])
    return {**os.environ, "PATH": path, "TF_CPP_MIN_LOG_LEVEL": "2",
            "CUDA_VISIBLE_DEVICES": "-1", "PYTHONUNBUFFERED": "1"}


def _kwargs(ctx: ConvertContext, work: Path, env: dict[str, str], *, int8: bool) -> dict:
    input_name = input_name_of(ctx.fp32_onnx)
    kwargs: dict[str, Any] = {
        "input_onnx_file_path": str(static_batch(ctx, _ensure(work / "static"))),
        "output_folder_path": str(work / "saved_model"),
        # the export has a dynamic batch axis; TFLite wants every shape static, and
        # batch_size=1 alone leaves symbolic dims in some ops (ConvTranspose, Reshape)
        "overwrite_input_shape": [f"{input_name}:{','.join(map(str, (1, *ctx.spec.shape)))}"],
        "copy_onnx_input_output_names_to_tflite": True,
        "enable_rnn_unroll": UNROLL_RNN,  # no WHILE loops: TF's calibrator segfaults on them
        # an exact GELU's Erf becomes TFLite's GELU (static_batch, _onnx_gelu); any
        # other Erf would be tf.math.erf, a Flex op the builtin interpreter lacks, so it is
        # written out as Abramowitz-Stegun 7.1.26 (Abs, Exp, Mul, Add: |error| <= 1.5e-7).
        # onnx2tf's Python API compares these names in lower case (its CLI lowers them)
        "replace_to_pseudo_operators": ["erf"],
        "verbosity": "info",
    }
    if shutil.which(ONNXSIM, path=env["PATH"]) is None:
        kwargs["not_use_onnxsim"] = True
        ctx.log(f"note: no {ONNXSIM} executable on PATH ({env['PATH']}); onnx2tf's own "
                f"simplification is skipped (pip package `{ONNXSIM}` provides it); the graph "
                "was simplified with onnxslim already")
    if int8:
        calib = work / "calib_channels_last.npy"
        np.save(calib, channels_last(ctx.calib.x).astype(np.float32))
        # the shared set is already normalised: mean 0, std 1 leaves it as it is
        kwargs.update(
            output_integer_quantized_tflite=True,
            quant_type="per-channel" if ctx.calib.per_channel else "per-tensor",
            custom_input_op_name_np_data_path=[[input_name, str(calib), 0.0, 1.0]],
        )
    return kwargs


def _run(ctx: ConvertContext, work: Path, keep: frozenset[str]) -> Path:
    """Run onnx2tf on ``ctx.fp32_onnx``, writing the variants in ``keep``; returns the
    folder holding its .tflite files."""
    int8 = any("integer" in v for v in keep)
    cwd = work / "cwd"
    cwd.mkdir()
    np.save(cwd / SAMPLE_FILE, np.zeros((20, 128, 128, 3), np.float32))
    env = child_env()
    kwargs = _kwargs(ctx, work, env, int8=int8)
    ctx.log(f"$ onnx2tf {json.dumps(kwargs)} (writing {', '.join(sorted(keep))})")
    stage = f"{FORMAT} conversion (onnx2tf{', int8 calibration' if int8 else ''})"
    ctx.log_path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with ctx.log_path.open("a", encoding="utf-8") as log:
            proc = subprocess.run([sys.executable, "-c", _CHILD,
                                   json.dumps({"kwargs": kwargs, "keep": sorted(keep)})], cwd=cwd,
                                  env=env, stdout=log, stderr=subprocess.STDOUT,
                                  timeout=ctx.options.timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise ConversionError(f"onnx2tf did not finish within {ctx.options.timeout_s:g} s",
                              where=stage, fix=f"see {ctx.log_path}; raise options.timeout_s "
                                               "for very large models") from None
    if proc.returncode != 0:
        raise ConversionError(
            failure(proc.returncode, ctx.log_path), where=stage,
            fix=f"full converter output in {ctx.log_path}; if an op is to blame, check "
                "`edgesmith inspect` and replace it or drop the tflite target")
    return work / "saved_model"


def failure(returncode: int, log_path: Path) -> str:
    """What went wrong, in one line: a crash by signal names the signal and the step it
    cut short (the log's last error line is then an earlier, unrelated warning); an exit
    with a status quotes the last error line."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return (f"onnx2tf crashed ({name}) while {last_step(log_path)}: a fault inside "
                "TensorFlow/onnx2tf, not an error it reported")
    return f"onnx2tf failed (exit status {returncode}): {last_error(log_path)}"


def last_step(log_path: Path) -> str:
    text = strip_ansi(log_path.read_text(errors="replace"))
    reached = "starting"
    for marker, step in _STEPS:
        if marker in text:
            reached = step
    return reached


def last_error(log_path: Path) -> str:
    """The most telling line of a failed run: onnx2tf's own diagnosis when it logged one
    ("ERROR: The current implementation of GridSample supports only ..."), else the last
    exception raised, else the last line. Matching any line with "error" in it quoted
    TensorFlow's start-up notice about oneDNN "round-off errors" instead of the cause."""
    lines = [strip_ansi(ln).strip() for ln in log_path.read_text(errors="replace").splitlines()]
    lines = [ln for ln in lines if ln]
    said = [ln for ln in lines if ln.startswith("ERROR: ") and "trace log" not in ln]
    if said:
        return said[0][len("ERROR: "):][:300]
    raised = [ln for ln in lines if re.match(r"^[\w.]+(Error|Exception)(: |$)", ln)]
    if raised:
        return raised[-1][:300]
    return lines[-1][:300] if lines else "(no output)"


def strip_ansi(s: str) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", s)


def static_batch(ctx: ConvertContext, folder: Path) -> Path:
    """A copy with batch 1 everywhere, re-simplified: onnx2tf reads declared output and
    value_info shapes (a symbolic batch left there breaks ConvTranspose), and constant
    shape arithmetic that only folds once the batch is known breaks its Reshape handling.
    onnxslim does the simplification onnx2tf would ask of the onnxsim executable."""
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
    if n_gelu := mark_exact_gelus(model):
        ctx.log(f"note: {n_gelu} exact GELU subgraph(s) (Div -> Erf -> Add -> Mul -> Mul) "
                "marked for onnx2tf's GELU detection: TFLite's builtin GELU")
    onnx.save(model, str(out))
    return out


def input_name_of(onnx_path: Path) -> str:
    import onnx

    return onnx.load(str(onnx_path), load_external_data=False).graph.input[0].name


def _ensure(p: Path) -> Path:
    Path(p).mkdir(parents=True, exist_ok=True)
    return Path(p)
