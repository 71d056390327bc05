"""Three ways to a TFLite model, side by side: the pinned onnx2tf 1.28 (the project's own
route, ``convert/_onnx2tf.py``), the newest onnx2tf 2.x, and litert-torch (torch -> TFLite
without ONNX or TensorFlow). Issue 15, item 4: keep what measures better.

The routes cannot share one environment (onnx2tf 2.x needs Python >= 3.12 and pins numpy,
onnx and onnxruntime to other versions than the project's; litert-torch pulls
transformers, jax and hub clients), so the benchmark runs in three steps, each a
subcommand, and hands files over in one folder (``--out``, default
``/tmp/tflite-routes``)::

    # 1. in the project's venv: checkpoints -> ONNX (exported and optimized as a build does),
    #    the static-batch copy onnx2tf reads, calibration + validation samples, torch logits
    nice -n 10 .venv/bin/python benchmarks/tflite_routes.py prepare --val 200 --calib 100
    # 2. once per route, each in the venv that has it (every conversion is its own child
    #    process with a timeout: a converter crash is a row, not the end)
    nice -n 10 .venv/bin/python benchmarks/tflite_routes.py convert --route onnx2tf-1.28
    nice -n 10 /tmp/venv-o2t2/bin/python benchmarks/tflite_routes.py convert --route onnx2tf-2
    nice -n 10 /tmp/venv-o2t2tf/bin/python benchmarks/tflite_routes.py convert --route onnx2tf-2-tf
    nice -n 10 /tmp/venv-litert/bin/python benchmarks/tflite_routes.py convert --route litert-torch
    # 3. in the project's venv (ai-edge-litert): every route's .tflite in ONE process, so
    #    accuracy and speed come from the same interpreter, timed in alternating rounds
    nice -n 10 .venv/bin/python benchmarks/tflite_routes.py measure --rounds 5 --runs 100
    # install footprint of a route's venv (size, packages, TensorFlow or not, pip check)
    python3 benchmarks/tflite_routes.py footprint /tmp/venv-o2t2

The venvs (torch stays the CPU 2.13.0 wheel; onnx2tf 2.x needs Python >= 3.12)::

    python3.11 -m venv /tmp/venv-litert && /tmp/venv-litert/bin/pip install torch==2.13.0 \
        && /tmp/venv-litert/bin/pip install litert-torch==0.10.0
    python3.12 -m venv /tmp/venv-o2t2 && /tmp/venv-o2t2/bin/pip install onnx2tf==2.6.9
    python3.12 -m venv /tmp/venv-o2t2tf \
        && /tmp/venv-o2t2tf/bin/pip install "onnx2tf[tensorflow]==2.6.9"

``--models a,b`` limits any step to some models (a slow route on a loaded machine: the
README's figures ran litert-torch and onnx2tf-2-tf on mobilenetv2, vit_small, kws_gru and
stn_mobilenetv2 only). ``measure`` prints JSON (one row per model x route x precision) and,
with ``--table``, a Markdown table on stderr. Models: the zoo's trained checkpoints
(examples/zoo/catalog.py, ``~/.cache/edgesmith/zoo``) plus the cases onnx2tf 1.28 failed
on: the conv+GRU net (``kws_gru``), the ViT (``vit_small``: exact GELU is ``Erf``) and
``stn_mobilenetv2``: the trained MobileNetV2-digits32 behind a fixed spatial-transformer
warp (``affine_grid`` + ``grid_sample``, a 0.9 zoom), so its weights are trained and its
top-1 means something.
INT8 is full-integer with float I/O (what ``tflite:int8`` writes by default: onnx2tf's
``integer_quant``; litert-torch's PT2E static int8), calibrated on the same samples of the
zoo's calibration split for every route; nothing is downloaded.

Figures per model x route x precision: status (or why not, one line), conversion wall
time (the child process: interpreter start, imports and conversion), size, max abs error
and mean cosine of the logits against torch on the validation samples, top-1 there, the
INT8 drop against torch's top-1 in points, and LiteRT XNNPACK p50 on one thread: for each
model and precision, every route's interpreter runs ``--runs`` untimed then ``--runs``
timed invokes per round, the routes' order rotating each round; the p50 reported is the
median over rounds, beside the median of the per-round ratios to onnx2tf 1.28.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
ZOO_DIR = ROOT / "examples" / "zoo"
DEFAULT_OUT = Path("/tmp/tflite-routes")
# onnx2tf-2: its default TensorFlow-free backend (flatbuffer_direct); onnx2tf-2-tf: its
# legacy backend (tf_converter, the `onnx2tf[tensorflow]` extra), as 1.28 converts
ROUTES = ("onnx2tf-1.28", "onnx2tf-2", "onnx2tf-2-tf", "litert-torch")
# the routes whose INT8 run also writes the float32 model (onnx2tf through TensorFlow)
SHARED_RUNS = ("onnx2tf-1.28", "onnx2tf-2-tf")
PRECISIONS = ("fp32", "int8")
# zoo models (catalog names) plus the affine_grid case built on a trained zoo model
MODELS = ("mobilenetv2", "mobilenetv3_small", "resnet18", "efficientnet_b0", "vit_small",
          "kws_gru", "stn_mobilenetv2")
STN_BASE = "mobilenetv2"
STN_THETA = ((0.9, 0.0, 0.0), (0.0, 0.9, 0.0))  # a fixed zoom: the warp keeps the digit
# onnx2tf fetches this file unless it is in its cwd (DESIGN.md, known traps)
SAMPLE_FILE = "calibration_image_sample_data_20x128x128x3_float32.npy"


# ---------------------------------------------------------------- torch side (any venv)

def _zoo_entry(name: str):
    sys.path.insert(0, str(ZOO_DIR))
    try:
        from catalog import ZOO, cache_dir
    finally:
        sys.path.pop(0)
    return ZOO[name], cache_dir()


def _import_file(path: Path, fn: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"routes_{path.stem}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return getattr(mod, fn)


def torch_model(spec: dict[str, Any]):
    """The trained torch module a spec names (arch file:callable + checkpoint), eval mode;
    wrapped in the fixed affine_grid warp for ``stn``. Needs only torch: the litert-torch
    route rebuilds it in its own venv from the same spec."""
    import torch

    file, fn = spec["arch"].rsplit(":", 1)
    model = _import_file(Path(file), fn)()
    model.load_state_dict(torch.load(spec["checkpoint"], map_location="cpu", weights_only=True))
    if spec.get("wrap") == "stn":
        model = _stn(model)
    return model.eval()


def _stn(inner):
    """``inner`` behind a spatial-transformer warp: affine_grid (ONNX AffineGrid, opset 20)
    and grid_sample (GridSample) with a constant theta."""
    import torch
    from torch import nn
    from torch.nn import functional as F

    class STN(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("theta", torch.tensor([STN_THETA], dtype=torch.float32))
            self.inner = inner

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            theta = self.theta.expand(x.shape[0], 2, 3)
            grid = F.affine_grid(theta, list(x.shape), align_corners=False)
            return self.inner(F.grid_sample(x, grid, align_corners=False))

    return STN()


# ---------------------------------------------------------------- 1. prepare (project venv)

def _spec_of(name: str) -> dict[str, Any]:
    base = STN_BASE if name == "stn_mobilenetv2" else name
    entry, cache = _zoo_entry(base)
    size = min(entry.sizes)
    info_path = cache / f"{entry.stem(size)}.json"
    if not info_path.is_file():
        raise SystemExit(f"error: no trained checkpoint for {base} ({info_path}); "
                         f"train it: .venv/bin/python examples/zoo/train.py {base}")
    info = json.loads(info_path.read_text())
    return {"name": name, "arch": entry.arch(size), "data": entry.data_ref(size),
            "checkpoint": info["checkpoint"], "wrap": "stn" if base != name else None,
            "input_shape": info["input_shape"] if "input_shape" in info else None,
            "trained_top1_val": info.get("val_accuracy")}


def _splits(spec: dict[str, Any], n_calib: int, n_val: int):
    """The zoo's calibration and validation splits (the same generator training used)."""
    file, fn = spec["data"].rsplit(":", 1)
    sys.path.insert(0, str(ZOO_DIR))
    try:
        import data as zoo_data
    finally:
        sys.path.pop(0)
    if fn == "keywords":
        d = zoo_data.keyword_features(n_train=10, n_calib=n_calib, n_val=n_val)
    else:
        kind, size = fn.rstrip("0123456789"), int(fn[len(fn.rstrip("0123456789")):])
        d = getattr(zoo_data, kind)(size=size, n_train=10, n_calib=n_calib, n_val=n_val)
    return d["calib"][0].astype(np.float32), d["val"][0].astype(np.float32), d["val"][1]


def prepare(out: Path, names: list[str], n_calib: int, n_val: int) -> None:
    import torch

    from edgesmith.convert import _onnx2tf
    from edgesmith.convert.export import export_onnx
    from edgesmith.convert.optimize import optimize

    torch.set_num_threads(1)
    for name in names:
        spec = _spec_of(name)
        d = out / name
        d.mkdir(parents=True, exist_ok=True)
        calib, val_x, val_y = _splits(spec, n_calib, n_val)
        spec["input_shape"] = list(calib.shape[1:])
        model = torch_model(spec)
        with torch.no_grad():
            logits = np.concatenate([model(torch.from_numpy(val_x[i:i + 50])).numpy()
                                     for i in range(0, len(val_x), 50)])
        for fname, arr in (("calib.npy", calib), ("val_x.npy", val_x), ("val_y.npy", val_y),
                           ("torch_val.npy", logits.astype(np.float32))):
            np.save(d / fname, arr)
        raw = export_onnx(model, (1, *calib.shape[1:]), d / "raw.onnx")
        optimize(raw, d / "model.onnx", val_x[:32])
        (d / "static").mkdir(exist_ok=True)
        _onnx2tf.static_batch(_Shim(d / "model.onnx", calib.shape[1:]), d / "static")
        spec["torch_top1"] = float((logits.argmax(1) == val_y).mean())
        (d / "spec.json").write_text(json.dumps(spec, indent=1))
        print(f"prepared {name}: input {spec['input_shape']}, torch top-1 "
              f"{spec['torch_top1']:.3f} on {len(val_y)} val samples", file=sys.stderr)


class _Shim:
    """What ``_onnx2tf.static_batch`` reads of a ConvertContext."""

    def __init__(self, onnx_path: Path, shape) -> None:
        self.fp32_onnx = onnx_path
        self.spec = type("S", (), {"shape": tuple(shape)})()

    def log(self, msg: str) -> None:
        print(msg, file=sys.stderr)


# ---------------------------------------------------------------- 2. convert (route venvs)

def convert(out: Path, route: str, names: list[str], timeout_s: float) -> None:
    """Each model x precision in a child process of this interpreter; results in
    ``<model>/<route>.json``."""
    for name in names:
        d = out / name
        if not (d / "spec.json").is_file():
            print(f"skip {name}: not prepared", file=sys.stderr)
            continue
        results = {}
        for precision in _order(route):
            if precision in results:
                continue
            results[precision] = _convert_one(d, route, precision, timeout_s)
            shared = d / f"{route}-fp32.tflite"
            if route in SHARED_RUNS and precision == "int8" and results["int8"]["status"] == "ok" \
                    and shared.is_file():
                results["fp32"] = {"status": "ok", "seconds": results["int8"]["seconds"],
                                   "size_bytes": shared.stat().st_size, "shared_run": True}
            print(f"{name} {route} {precision}: {results[precision]['status']} "
                  f"{results[precision].get('error', '')} "
                  f"({results[precision]['seconds']} s)", file=sys.stderr)
        results["versions"] = _versions(route)
        (d / f"{route}.json").write_text(json.dumps(results, indent=1))


def _order(route: str) -> tuple[str, ...]:
    """onnx2tf through TensorFlow converts INT8 first: like a build's tflite targets, one
    run writes float32 and the INT8 model (TensorFlow started and the graph converted
    once); float32 is converted alone only when that run fails."""
    return ("int8", "fp32") if route in SHARED_RUNS else PRECISIONS


def _convert_one(d: Path, route: str, precision: str, timeout_s: float) -> dict[str, Any]:
    target = d / f"{route}-{precision}.tflite"
    for p in ([target, d / f"{route}-fp32.tflite"] if route in SHARED_RUNS else [target]):
        p.unlink(missing_ok=True)
    log = d / f"{route}-{precision}.log"
    start = time.perf_counter()
    try:
        with log.open("w") as f:
            proc = subprocess.run([sys.executable, __file__, "_one", "--route", route,
                                   "--dir", str(d), "--precision", precision],
                                  stdout=f, stderr=subprocess.STDOUT, timeout=timeout_s,
                                  env={**os.environ, "CUDA_VISIBLE_DEVICES": "-1",
                                       "TF_CPP_MIN_LOG_LEVEL": "2"})
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        rc = "timeout"
    seconds = round(time.perf_counter() - start, 1)
    if rc == 0 and target.is_file():
        return {"status": "ok", "seconds": seconds, "size_bytes": target.stat().st_size}
    return {"status": "failed", "seconds": seconds, "error": _last_error(log, rc)}


def _last_error(log: Path, rc) -> str:
    lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    # no colour codes, no temp folders (the message after them is what tells)
    lines = [re.sub(r"(/[\w.+-]+)+/", "", re.sub(r"\x1b\[[0-9;]*m", "", ln)) for ln in lines]
    if rc == "timeout":
        return "timed out"
    if isinstance(rc, int) and rc < 0:
        return f"crashed (signal {-rc})"
    # onnx2tf's own diagnosis, when it gave one, comes first ("ERROR: The current
    # implementation of GridSample supports only ..."); the traceback follows it
    said = [ln for ln in lines if ln.startswith("ERROR: ") and "trace log" not in ln]
    if said:
        return said[0][len("ERROR: "):][:240]
    # onnx2tf (via TensorFlow) logs a failed INT8 step as a warning and goes on: the
    # exception just before "WARNING: ... output failed." is why
    failed = [i for i, ln in enumerate(lines) if ln.startswith("WARNING:") and "failed" in ln]
    if failed:
        why = [ln for ln in lines[:failed[0]] if re.match(r"^[\w.]+(Error|Exception): ", ln)]
        if why:
            return f"{lines[failed[0]][len('WARNING: '):]} {why[-1]}"[:240]
    # in a chained traceback the cause is the exception line just before "The above
    # exception was the direct cause" (onnx2tf 2.x re-raises a generic RuntimeError);
    # earlier exception lines can be ones it logged and went past
    cut = max([i for i, ln in enumerate(lines) if ln.startswith(
        ("The above exception", "During handling"))], default=len(lines))
    raised = [ln for ln in lines[:cut] if re.match(r"^[\w.]+(Error|Exception): ", ln)] or \
        [ln for ln in lines if re.match(r"^[\w.]+(Error|Exception): ", ln)]
    if raised:
        return raised[-1][:240]
    for ln in reversed(lines):
        if any(k in ln for k in ("Error", "error", "Exception", "ERROR")):
            return ln[:240]
    return (lines[-1][:240] if lines else f"exit status {rc}, no output")


def _versions(route: str) -> dict[str, str]:
    from importlib import metadata

    names = {"onnx2tf-1.28": ("onnx2tf", "tensorflow"), "onnx2tf-2": ("onnx2tf", "ai-edge-litert"),
             "onnx2tf-2-tf": ("onnx2tf", "tensorflow"),
             "litert-torch": ("litert-torch", "torch", "ai-edge-litert", "ai-edge-quantizer")}
    found = {}
    for n in names[route]:
        try:
            found[n] = metadata.version(n)
        except metadata.PackageNotFoundError:
            found[n] = "absent"
    found["python"] = sys.version.split()[0]
    return found


def one(d: Path, route: str, precision: str) -> None:
    """Child: one conversion, writing ``<route>-<precision>.tflite`` into ``d``."""
    spec = json.loads((d / "spec.json").read_text())
    calib = np.load(d / "calib.npy")
    target = d / f"{route}-{precision}.tflite"
    if route == "onnx2tf-1.28":
        produced = _via_project(d, spec, calib, precision)
    elif route in ("onnx2tf-2", "onnx2tf-2-tf"):
        backend = "tf_converter" if route.endswith("-tf") else "flatbuffer_direct"
        produced = _via_onnx2tf2(d, calib, precision, backend)
    elif route == "litert-torch":
        produced = _via_litert_torch(d, spec, calib, precision)
    else:
        raise SystemExit(f"unknown route {route}")
    shutil.copyfile(produced, target)


def _via_project(d: Path, spec: dict, calib: np.ndarray, precision: str) -> Path:
    """The project's TFLite target itself (convert/tflite.py -> convert/_onnx2tf.py)."""
    from edgesmith.inputs import CalibrationSet, InputSpec
    from edgesmith.pipeline.registry import get
    from edgesmith.profiles.schema import TargetSpec
    from edgesmith.target import ConvertContext

    t = get("tflite")
    work = Path(tempfile.mkdtemp(prefix=f"o2t128-{precision}-", dir=d))
    ctx = ConvertContext(fp32_onnx=d / "model.onnx", spec=InputSpec(tuple(spec["input_shape"])),
                         calib=CalibrationSet(calib),
                         target=TargetSpec(format="tflite", precision=precision, options={}),
                         options=t.Options.model_validate({}), profile=None,
                         out_dir=work / "out", work_dir=work / "work",
                         log_path=d / f"onnx2tf-1.28-{precision}.converter.log")
    for p in (ctx.out_dir, ctx.work_dir):
        p.mkdir(parents=True)
    produced = Path(t.convert(ctx).path)
    if precision == "int8":  # the float32 model the same onnx2tf run wrote
        for f in ctx.work_dir.glob("onnx2tf-*-int8/saved_model/*_float32.tflite"):
            shutil.copyfile(f, d / "onnx2tf-1.28-fp32.tflite")
    return produced


def _via_onnx2tf2(d: Path, calib: np.ndarray, precision: str, backend: str) -> Path:
    """onnx2tf 2.x with the project's 1.28 arguments (convert/_onnx2tf.py ``_kwargs``) on
    the same static-batch copy, in a temp cwd holding the synthetic sample file, with
    ``backend``: flatbuffer_direct (its default, no TensorFlow) or tf_converter."""
    import onnx
    import onnx2tf

    static = d / "static" / "model.onnx"
    m = onnx.load(str(static), load_external_data=False)
    name = m.graph.input[0].name
    shape = [x.dim_value for x in m.graph.input[0].type.tensor_type.shape.dim]
    work = Path(tempfile.mkdtemp(prefix=f"o2t2-{precision}-", dir=d))
    np.save(work / SAMPLE_FILE, np.zeros((20, 128, 128, 3), np.float32))
    kwargs: dict[str, Any] = {
        "input_onnx_file_path": str(static), "output_folder_path": str(work / "saved_model"),
        "overwrite_input_shape": [f"{name}:{','.join(map(str, shape))}"],
        "copy_onnx_input_output_names_to_tflite": True, "enable_rnn_unroll": True,
        "verbosity": "info", "tflite_backend": backend}
    if precision == "int8":
        nhwc = np.ascontiguousarray(np.moveaxis(calib, 1, -1)) if calib.ndim >= 3 else calib
        np.save(work / "calib_nhwc.npy", nhwc.astype(np.float32))
        kwargs.update(output_integer_quantized_tflite=True, quant_type="per-channel",
                      custom_input_op_name_np_data_path=[[name, str(work / "calib_nhwc.npy"),
                                                          0.0, 1.0]])
    os.chdir(work)
    onnx2tf.convert(**kwargs)
    float32 = work / "saved_model" / "model_float32.tflite"
    if precision == "fp32":
        return float32
    if backend == "tf_converter" and float32.is_file():  # the same run's float32 model
        shutil.copyfile(float32, d / "onnx2tf-2-tf-fp32.tflite")
    return work / "saved_model" / "model_integer_quant.tflite"


def _via_litert_torch(d: Path, spec: dict, calib: np.ndarray, precision: str) -> Path:
    """litert-torch from the torch module: fp32 as is; int8 through its PT2E quantizer
    (per-channel symmetric weights, static per-tensor activations) calibrated on the
    shared samples."""
    import litert_torch
    import torch

    torch.set_num_threads(1)
    model = torch_model(spec)
    sample = (torch.from_numpy(calib[:1]),)
    path = d / f"litert-torch-{precision}.raw.tflite"
    if precision == "fp32":
        litert_torch.convert(model, sample).export(str(path))
        return path
    from litert_torch.quantize.pt2e_quantizer import (
        PT2EQuantizer,
        get_symmetric_quantization_config,
    )
    from litert_torch.quantize.quant_config import QuantConfig
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    quantizer = PT2EQuantizer().set_global(
        get_symmetric_quantization_config(is_per_channel=True, is_dynamic=False))
    exported = torch.export.export(model, sample).module()
    prepared = prepare_pt2e(exported, quantizer)
    with torch.no_grad():
        for i in range(len(calib)):
            prepared(torch.from_numpy(calib[i:i + 1]))
    quantized = convert_pt2e(prepared, fold_quantize=False)
    litert_torch.convert(quantized, sample,
                         quant_config=QuantConfig(pt2e_quantizer=quantizer)).export(str(path))
    return path


# ---------------------------------------------------------------- 3. measure (project venv)

class _Model:
    """A LiteRT interpreter (XNNPACK, one thread) that takes NCHW float samples, whatever
    layout (NHWC from onnx2tf, NCHW from litert-torch) and I/O type the file has."""

    def __init__(self, path: Path, shape: tuple[int, ...]) -> None:
        from ai_edge_litert.interpreter import Interpreter

        self.it = Interpreter(model_path=str(path), num_threads=1)
        self.it.allocate_tensors()
        self.inp = self.it.get_input_details()[0]
        self.out = self.it.get_output_details()[0]
        got = tuple(int(v) for v in self.inp["shape"][1:])
        self.nhwc = got != tuple(shape) and len(shape) >= 2
        self.layout = "channels-last" if self.nhwc else "as torch"

    def __call__(self, x: np.ndarray) -> np.ndarray:
        x = np.moveaxis(x, 0, -1) if self.nhwc else x
        x = x[None]
        scale, zp = self.inp["quantization"]
        if self.inp["dtype"] != np.float32:
            x = np.clip(np.round(x / scale + zp), -128, 127)
        self.it.set_tensor(self.inp["index"], x.astype(self.inp["dtype"]))
        self.it.invoke()
        y = self.it.get_tensor(self.out["index"])[0]
        scale, zp = self.out["quantization"]
        return ((y.astype(np.float32) - zp) * scale) if self.out["dtype"] != np.float32 else y


def _accuracy(m: _Model, val_x: np.ndarray, val_y: np.ndarray, ref: np.ndarray) -> dict:
    got = np.stack([m(x) for x in val_x]).reshape(ref.shape)
    cos = (got * ref).sum(1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(ref, axis=1) + 1e-12)
    return {"max_abs_err": round(float(np.abs(got - ref).max()), 5),
            "cosine_mean": round(float(cos.mean()), 5), "cosine_min": round(float(cos.min()), 5),
            "top1": round(float((got.argmax(1) == val_y).mean()), 4), "layout": m.layout}


def _times(m: _Model, runs: int) -> float:
    for _ in range(runs):
        m.it.invoke()
    lat = []
    for _ in range(runs):
        t0 = time.perf_counter()
        m.it.invoke()
        lat.append((time.perf_counter() - t0) * 1e3)
    return float(np.median(lat))


def _rounds(models: dict[str, _Model], x: np.ndarray, runs: int, rounds: int) -> dict:
    """p50 per route: alternating rounds, the order rotating; median over rounds, and the
    median of each round's ratio to onnx2tf 1.28 (the pin)."""
    names = list(models)
    for m in models.values():
        m(x)  # a real sample in the input tensor
    p50s: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        for n in names[r % len(names):] + names[:r % len(names)]:
            p50s[n].append(_times(models[n], runs))
    out = {}
    for n in names:
        row = {"p50_ms": round(float(np.median(p50s[n])), 4),
               "p50_min_ms": round(float(min(p50s[n])), 4)}
        if "onnx2tf-1.28" in p50s and n != "onnx2tf-1.28":
            row["ratio_to_1.28"] = round(float(np.median(
                np.array(p50s[n]) / np.array(p50s["onnx2tf-1.28"]))), 3)
        out[n] = row
    return out


def measure(out: Path, names: list[str], runs: int, rounds: int) -> list[dict[str, Any]]:
    rows = []
    for name in names:
        d = out / name
        if not (d / "spec.json").is_file():
            continue
        spec = json.loads((d / "spec.json").read_text())
        val_x, val_y = np.load(d / "val_x.npy"), np.load(d / "val_y.npy")
        ref = np.load(d / "torch_val.npy")
        shape = tuple(spec["input_shape"])
        for precision in PRECISIONS:
            live = {}
            for route in ROUTES:
                res_path = d / f"{route}.json"
                if not res_path.is_file():
                    continue
                res = json.loads(res_path.read_text())
                conv = res[precision]
                row = {"model": name, "route": route, "precision": precision,
                       "status": conv["status"], "convert_s": conv["seconds"],
                       "shared_run": conv.get("shared_run", False),
                       "versions": res.get("versions"), "torch_top1": spec["torch_top1"],
                       "val_samples": len(val_y), "calib_samples": int(
                           np.load(d / "calib.npy", mmap_mode="r").shape[0])}
                if conv["status"] == "ok":
                    row["size_bytes"] = conv["size_bytes"]
                    try:
                        live[route] = _Model(d / f"{route}-{precision}.tflite", shape)
                        row.update(_accuracy(live[route], val_x, val_y, ref))
                        row["drop_pt"] = round(100 * (spec["torch_top1"] - row["top1"]), 2)
                    except Exception as e:  # a file LiteRT cannot load or run is a row too
                        live.pop(route, None)
                        row["status"] = "runtime error"
                        row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
                else:  # the log's cause line (read again: the parser may be newer);
                    # the project's route keeps onnx2tf's own output in a converter log
                    logs = [p for p in (d / f"{route}-{precision}.converter.log",
                                        d / f"{route}-{precision}.log") if p.is_file()]
                    err = conv.get("error", "")
                    row["error"] = err if err.startswith(("crashed", "timed out")) or \
                        not logs else _last_error(logs[0], 1)
                rows.append(row)
            if live:
                timed = _rounds(live, val_x[0], runs, rounds)
                for row in rows:
                    if row["model"] == name and row["precision"] == precision and \
                            row["route"] in timed:
                        row.update(timed[row["route"]])
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    head = ("| model | route | prec | status | convert s | size MB | max abs err | cos mean "
            "| top-1 | drop pt | p50 ms | ×1.28 |")
    lines = [head, "|---" * (head.count("|") - 1) + "|"]
    for r in rows:
        ok = r["status"] == "ok"

        def f(key: str, fmt: str = "{}", r: dict = r, ok: bool = ok) -> str:
            return fmt.format(r[key]) if ok and r.get(key) is not None else "–"

        error = re.sub(r"^([\w]+\.)+(?=\w+(Error|Exception))", "", r.get("error") or "")
        status = "ok" if ok else f"{r['status']}: {error}"[:190]
        shared = " (shared run)" if r.get("shared_run") else ""
        lines.append(
            f"| {r['model']} | {r['route']} | {r['precision']} | {status} | "
            f"{r['convert_s']}{shared} | "
            f"{(r['size_bytes'] / 1e6 if ok else 0):.2f} | {f('max_abs_err')} | "
            f"{f('cosine_mean')} | {f('top1', '{:.3f}')} | {f('drop_pt')} | {f('p50_ms')} | "
            f"{f('ratio_to_1.28')} |")
    return "\n".join(lines)


# ---------------------------------------------------------------- footprint (stdlib only)

def footprint(venv: Path) -> dict[str, Any]:
    """A venv's install footprint: site-packages MB, distributions, whether TensorFlow,
    transformers or jax came with it, and what ``pip check`` says."""
    py = venv / "bin" / "python"
    listing = json.loads(subprocess.run([str(py), "-m", "pip", "list", "--format=json"],
                                        capture_output=True, text=True, check=True).stdout)
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()"
                           "['purelib'])"], capture_output=True, text=True).stdout.strip()
    size = sum(f.stat().st_size for f in Path(site).rglob("*") if f.is_file() and
               not f.is_symlink())
    check = subprocess.run([str(py), "-m", "pip", "check"], capture_output=True, text=True)
    names = {p["name"].lower().replace("_", "-"): p["version"] for p in listing}
    return {"venv": str(venv), "site_packages_mb": round(size / 2**20), "packages": len(names),
            "pulls": {k: names.get(k) for k in ("tensorflow", "tensorflow-cpu", "tf-keras",
                                                 "torch", "transformers", "jax", "kagglehub",
                                                 "huggingface-hub", "onnx2tf", "litert-torch")
                      if k in names},
            "pip_check": (check.stdout + check.stderr).strip().splitlines()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    for cmd in ("prepare", "convert", "measure"):
        p = sub.add_parser(cmd)
        p.add_argument("--out", type=Path, default=DEFAULT_OUT)
        p.add_argument("--models", default=",".join(MODELS))
    pp = sub.choices["prepare"]
    pp.add_argument("--val", type=int, default=200)
    pp.add_argument("--calib", type=int, default=100)
    pc = sub.choices["convert"]
    pc.add_argument("--route", choices=ROUTES, required=True)
    pc.add_argument("--timeout", type=float, default=900.0)
    pm = sub.choices["measure"]
    pm.add_argument("--runs", type=int, default=100)
    pm.add_argument("--rounds", type=int, default=5)
    pm.add_argument("--table", action="store_true")
    po = sub.add_parser("_one")
    po.add_argument("--route", choices=ROUTES, required=True)
    po.add_argument("--dir", type=Path, required=True)
    po.add_argument("--precision", choices=PRECISIONS, required=True)
    pf = sub.add_parser("footprint")
    pf.add_argument("venv", type=Path)
    a = ap.parse_args(argv)
    if a.cmd == "footprint":
        if not (a.venv / "bin" / "python").is_file():
            ap.error(f"footprint: {a.venv} is not a venv (no bin/python); make it first "
                     "(see the module docstring)")
        print(json.dumps(footprint(a.venv), indent=1))
        return 0
    if a.cmd == "_one":
        one(a.dir, a.route, a.precision)
        return 0
    names = [n for n in a.models.split(",") if n]
    unknown = sorted(set(names) - set(MODELS))
    if unknown:
        ap.error(f"--models: no model named {', '.join(unknown)}; choose from {','.join(MODELS)}")
    a.out.mkdir(parents=True, exist_ok=True)
    if a.cmd != "prepare" and not any((a.out / n / "spec.json").is_file() for n in names):
        ap.error(f"{a.cmd}: none of {','.join(names)} is prepared in {a.out}; run "
                 f"`prepare --out {a.out}` in the project's venv first")
    if a.cmd == "prepare":
        prepare(a.out, names, a.calib, a.val)
    elif a.cmd == "convert":
        convert(a.out, a.route, names, a.timeout)
    else:
        rows = measure(a.out, names, a.runs, a.rounds)
        load = os.getloadavg()
        print(json.dumps({"load_average": [round(v, 2) for v in load], "rows": rows}, indent=1))
        if a.table:
            print(table(rows), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
