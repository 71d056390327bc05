"""C runtime vs peers, one run: INT8 latency vs LiteRT (XNNPACK, 1 thread) and TFLite
Micro, arena vs TFLM's, planner efficiency, peak RSS. Prints one JSON document.

    .venv/bin/python benchmarks/c_runtime.py [--runs 200] [--rounds 5]
    .venv/bin/python benchmarks/c_runtime.py --nets mobilenetv2:96,resnet18:224 \
        [--runs 20] [--rounds 3]

--nets benchmarks zoo networks (examples/zoo) at the given input sizes instead. A net with
a trained zoo checkpoint (examples/zoo/catalog.py: cache_dir(); 10 classes, trained at
32x32, fully convolutional so it runs at any size) gets those weights, calibrated on the
zoo's own data at that size; the others get 1000 classes and random weights calibrated on
random data (fine for speed, meaningless for accuracy); the JSON says "trained" or
"random" per net. C int8 and fp32 run against LiteRT (XNNPACK), onnxruntime and OpenVINO
(f32 forced), all on one thread, in alternating rounds; under each net's name the JSON
keeps ratio_c_over_litert / _ort / _openvino as {int8, fp32}, the C int8 GMAC/s and its %
of this CPU's measured int8 peak (benchmarks/int8_peak.c, built and run at the start and
at the end), the int8 arena against TFLite Micro's (arena_int8; arena_int8_in_place with the
C option input: float_in_place, the int8 copy written over the float input; arena_int8_input
with both taking the input quantized: C input: int8, the .tflite's input QUANTIZE folded
out), and the five slowest C steps (edgesmith_bench --profile); a "geomean" block sums the
ratios over the nets.

The C / LiteRT ratio comes from alternating rounds (see _head_to_head): on a shared
machine a single back-to-back pair can differ by 1.5x from one minute to the next.

Everything runs on one CPU (--cpu, default the lowest this process may use; the C binaries
inherit the mask): the peers run inside this process and each C round is a new process, and
unpinned the two can land on different cores. On the 2-vCPU Intel Xeon VM the verdicts come
from, C alone had slow rounds the peers in the same rounds did not (MobileNetV2-224 fp32,
C p50 8.74 / 9.00 / 8.55 / 5.23 / 5.12 ms against LiteRT 5.19-5.28).

Peers that are not installed, or a TFLite model that cannot be produced here, are
reported as skipped with the reason, never as a figure.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from edgesmith.convert.runtime_compat import (  # noqa: E402
    builtin_code,
    tflite_model,
    write_tflite,
)
from edgesmith.targets import codegen, run  # noqa: E402
from tests.targets._helpers import _load, _qdq, export  # noqa: E402


def _models(work: Path):
    import torch

    from edgesmith.pipeline.data import digits

    s = digits()
    d = _load("digits", "model").build().eval()
    yield "digits", export(d, torch.from_numpy(s.val_x[:1]), work / "digits.onnx"), s.calib_x, \
        s.val_x[:1]
    m = _load("mobilenetv2", "model")
    x, _ = m.sample_data(64, seed=3)
    yield "mobilenetv2", export(m.build(), torch.from_numpy(x[:1]), work / "mnv2.onnx"), x, x[:1]


def _tflite_int8(onnx_path: Path, calib: np.ndarray, work: Path, precision: str = "int8"):
    from edgesmith.compress.calibration import CalibrationSet
    from edgesmith.pipeline.data import InputSpec
    from edgesmith.pipeline.registry import get
    from edgesmith.profiles.schema import TargetSpec
    from edgesmith.target import ConvertContext

    t = get("tflite")
    out = work / "tflite_out"
    (work / "tflite_work").mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    spec = InputSpec(tuple(calib.shape[1:]))
    ctx = ConvertContext(fp32_onnx=onnx_path, spec=spec, calib=CalibrationSet(calib[:64]),
                         target=TargetSpec(format="tflite", precision=precision, options={}),
                         options=t.Options.model_validate({}), profile=None, out_dir=out,
                         work_dir=work / "tflite_work", log_path=work / "tflite.log")
    return Path(t.convert(ctx).path)


def _litert(model: Path):
    """A LiteRT interpreter (XNNPACK, one thread) on zeros, warmed up."""
    from ai_edge_litert.interpreter import Interpreter

    it = Interpreter(model_path=str(model), num_threads=1)
    it.allocate_tensors()
    inp = it.get_input_details()[0]
    it.set_tensor(inp["index"], np.zeros(inp["shape"], inp["dtype"]))
    for _ in range(5):
        it.invoke()
    return it


def _litert_times(it, runs: int) -> np.ndarray:
    lat = []
    for _ in range(runs):
        t0 = time.perf_counter()
        it.invoke()
        lat.append((time.perf_counter() - t0) * 1e3)
    return np.array(lat)


def _head_to_head(binary: Path, cwd: Path, it, runs: int, rounds: int) -> dict:
    """C and LiteRT in alternating rounds, so that a slow spell of this (shared, 2-core)
    machine hits both: the ratio is the median over rounds of C p50 / LiteRT p50, each
    pair measured back to back; the minimums are reported beside it. Each side first runs
    as many untimed inferences as it times: the C binary starts as a new process, often on
    the core that sat idle (at a low clock) while LiteRT ran, and 10 warm-up runs (1.5 ms
    of a MobileNetV2-style model) left its p50 up to 1.4x its minimum in some rounds."""
    per, c_min, l_min = [], [], []
    for _ in range(rounds):
        c = run.run_bench(binary, ["--input", "in.raw", "--runs", str(runs), "--warmup",
                                   str(runs)], cwd=cwd)["latency_ms"]
        _litert_times(it, runs)  # the same warm-up on LiteRT's side
        lt = _litert_times(it, runs)
        per.append((c["p50"], float(np.median(lt))))
        c_min.append(c["min"])
        l_min.append(float(lt.min()))
    c50 = float(np.median([c for c, _ in per]))
    l50 = float(np.median([lt for _, lt in per]))
    return {"rounds": rounds, "runs_per_round": runs, "c_p50_ms": c50, "litert_p50_ms": l50,
            "ratio_c_over_litert": float(np.median([c / lt for c, lt in per])),
            "c_min_ms": min(c_min), "litert_min_ms": min(l_min),
            "ratio_min_c_over_litert": min(c_min) / min(l_min),
            "per_round_p50_ms": [[round(c, 5), round(lt, 5)] for c, lt in per]}


def _c_output(fn):
    """(fn(), or the exception it raised; what C++ wrote to fd 1/2 meanwhile): TFLM reports
    through printf, not Python (print_allocations' figures, "Didn't find op for builtin
    opcode ..."), so both descriptors go into a pipe around the call."""
    import os
    import threading

    sys.stdout.flush()
    sys.stderr.flush()
    r, w = os.pipe()
    saved = [os.dup(1), os.dup(2)]
    chunks: list[bytes] = []
    reader = threading.Thread(target=lambda: chunks.extend(iter(lambda: os.read(r, 65536), b"")))
    reader.start()  # drained while fn runs: a full pipe would block it
    os.dup2(w, 1)
    os.dup2(w, 2)
    try:
        try:
            res = fn()
        except Exception as e:  # noqa: BLE001 - handed to the caller with the text
            res = e
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        os.close(w)
        for fd in saved:
            os.close(fd)
        reader.join()
        os.close(r)
    return res, b"".join(chunks).decode(errors="replace")


def _tflm_arena(it) -> dict:
    """TFLM's RecordingMicroAllocator figures, parsed from print_allocations()."""
    import re

    _, text = _c_output(it.print_allocations)
    out = {}
    for key in ("total", "head", "tail"):
        m = re.search(rf"Arena allocation {key} (\d+) bytes", text)
        out[key] = int(m.group(1)) if m else None
    return out


# Ops a LiteRT model may hold that TFLite Micro does not register, and the registered op
# that stands in for each when only TFLM's arena is measured: element-wise on one int8
# tensor, output the input's shape, no scratch, so the tensors TFLM plans are the same.
# (onnx2tf writes a MobileNetV3's HardSigmoid as RELU_0_TO_1.)
TFLM_STAND_INS = {"RELU_0_TO_1": "RELU6"}


def tflite_stand_ins(src: Path, dst: Path, subs: dict[str, str]) -> dict[str, str]:
    """Write ``src`` to ``dst`` with each operator code named in ``subs`` replaced by its
    stand-in (version 1); returns the replacements made ({} and no file when none)."""
    from ai_edge_litert import schema_py_generated as schema

    codes = {k: v for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}
    names = {v: k for k, v in codes.items()}
    model = tflite_model(src)
    done = {}
    for oc in model.operatorCodes or []:
        name = names.get(builtin_code(oc))
        if name in subs and not oc.customCode:
            oc.builtinCode = oc.deprecatedBuiltinCode = codes[subs[name]]
            oc.version = 1
            done[name] = subs[name]
    if done:
        write_tflite(model, dst)
    return done


def _tflm(model: Path, runs: int):
    from tflite_micro.python.tflite_micro import runtime

    it = runtime.Interpreter.from_file(str(model))
    inp = it.get_input_details(0)
    it.set_input(np.zeros(inp["shape"], inp["dtype"]), 0)
    it.invoke()
    lat = []
    for _ in range(max(5, runs // 10)):
        t0 = time.perf_counter()
        it.invoke()
        lat.append((time.perf_counter() - t0) * 1e3)
    return float(np.median(lat)), _tflm_arena(it)


def _litert_invoke_floor_ms(runs: int) -> float | str:
    """p50 of invoke() on a model of one 8-float Add: the Python -> C++ call cost inside
    every LiteRT figure here (the C runtime times itself in C), or why it was not measured.
    It is reported, and subtracted in one extra ratio, never folded into the main one."""
    try:
        import tensorflow as tf
    except ImportError:
        return "tensorflow not installed: no trivial model to time"

    @tf.function(input_signature=[tf.TensorSpec([1, 8], tf.float32)])
    def add_one(x):
        return x + 1.0

    conv = tf.lite.TFLiteConverter.from_concrete_functions([add_one.get_concrete_function()],
                                                           add_one)
    from ai_edge_litert.interpreter import Interpreter

    it = Interpreter(model_content=conv.convert(), num_threads=1)
    it.allocate_tensors()
    for _ in range(100):
        it.invoke()
    return float(np.median(_litert_times(it, runs)))


def _python_call_overhead_ms(runs: int) -> float:
    """perf_counter around a no-op Python call: the floor included in the peers' figures
    (they are timed from Python; the C runtime times itself in C)."""
    def f():
        return None

    lat = []
    for _ in range(runs):
        t0 = time.perf_counter()
        f()
        lat.append((time.perf_counter() - t0) * 1e3)
    return float(np.median(lat))


# zoo networks by the name --nets takes: (file in examples/zoo, callable)
ZOO_NETS = {"mobilenetv2": "mobilenetv2.py", "mobilenetv3_small": "mobilenetv3.py",
            "resnet18": "resnet18.py", "efficientnet_b0": "efficientnet.py"}


def _zoo_module(name: str):
    """The zoo file defining ``name`` (examples/zoo), imported by path."""
    import importlib.util

    if name not in ZOO_NETS:
        raise SystemExit(f"--nets: unknown network {name!r}; known: {', '.join(ZOO_NETS)}")
    spec = importlib.util.spec_from_file_location(f"zoo_{name}",
                                                  ROOT / "examples" / "zoo" / ZOO_NETS[name])
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def zoo_checkpoint(name: str) -> Path | None:
    """The zoo's trained checkpoint of ``name`` (examples/zoo/train.py writes them to
    catalog.cache_dir()), or None. They are 10-class; the nets are fully convolutional up
    to a global pool, so a checkpoint trained at 32x32 loads and runs at any size."""
    sys.path.insert(0, str(ROOT / "examples" / "zoo"))
    try:
        from catalog import ZOO, cache_dir
    finally:
        sys.path.pop(0)
    entry = ZOO[name]
    found = sorted(cache_dir().glob(f"{entry.stem(min(entry.sizes))}.pt")) or \
        sorted(cache_dir().glob(f"{name}-{entry.data}*.pt"))
    return found[0] if found else None


def zoo_data(name: str, size: int, n_calib: int, n_val: int) -> dict:
    """The zoo's own data set of ``name`` (digits or shapes) at ``size``: calib and val."""
    sys.path.insert(0, str(ROOT / "examples" / "zoo"))
    try:
        import data as zoo_sets
        from catalog import ZOO
    finally:
        sys.path.pop(0)
    make = getattr(zoo_sets, ZOO[name].data)
    return make(size=size, n_train=10, n_calib=n_calib, n_val=n_val)


def zoo_net(name: str, size: int, work: Path, n_calib: int = 32, n_val: int = 1):
    """(fp32 ONNX, calibration samples, "trained" | "random", val split or None) of a zoo
    network at ``size``. With a checkpoint: its trained 10-class weights, calibrated on
    the zoo's data at that size (so int8 scales are the ones a user gets). Without one:
    1000 classes and random weights calibrated on random normal data, which is all a speed
    figure needs (and meaningless for accuracy)."""
    import torch

    mod = _zoo_module(name)
    ckpt = zoo_checkpoint(name)
    if ckpt is None:
        model, kind, val = mod.build(num_classes=1000).eval(), "random", None
        x = np.random.default_rng(0).standard_normal((n_calib, 3, size, size)).astype(np.float32)
    else:
        model = mod.build(num_classes=10)
        model.load_state_dict(torch.load(ckpt, map_location="cpu", weights_only=True))
        model.eval()
        splits = zoo_data(name, size, n_calib, n_val)
        x, val, kind = splits["calib"][0].astype(np.float32), splits["val"], "trained"
    onnx_path = export(model, torch.from_numpy(x[:1]), work / f"{name}_{size}.onnx")
    return onnx_path, x, kind, val


def count_macs(onnx_path: Path) -> int:
    """Multiply-accumulates of the Conv, Gemm and MatMul nodes (shapes inferred)."""
    import onnx

    m = onnx.shape_inference.infer_shapes(onnx.load(str(onnx_path)))
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
              for v in [*m.graph.value_info, *m.graph.output, *m.graph.input]}
    shapes.update({i.name: list(i.dims) for i in m.graph.initializer})
    total = 0
    for n in m.graph.node:
        if n.op_type == "Conv":
            w, y = shapes[n.input[1]], shapes[n.output[0]]
            total += int(np.prod(y[1:])) * int(np.prod(w[1:]))
        elif n.op_type in ("Gemm", "MatMul"):
            w, y = shapes[n.input[1]], shapes[n.output[0]]
            total += int(np.prod(y)) * (w[1] if n.op_type == "Gemm" and any(
                a.name == "transB" and a.i for a in n.attribute) else w[0])
    return total


# ---- peers of --nets: each a (name, timer) where timer(n) runs n inferences -> ms each ----

def _timer(call) -> callable:
    """n timed calls of ``call`` (one inference each), in milliseconds."""
    def times(n: int) -> np.ndarray:
        lat = np.empty(n)
        for i in range(n):
            t0 = time.perf_counter()
            call()
            lat[i] = (time.perf_counter() - t0) * 1e3
        return lat
    return times


def _ort_peer(model: Path, x: np.ndarray):
    """onnxruntime, CPU provider, 1 intra-op thread, ORT_ENABLE_ALL (its fused int8
    kernels on the QDQ model)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.log_severity_level = 3
    sess = ort.InferenceSession(str(model), so, providers=["CPUExecutionProvider"])
    feed = {sess.get_inputs()[0].name: np.ascontiguousarray(x[:1], np.float32)}
    return _timer(lambda: sess.run(None, feed))


def _openvino_peer(model: Path, x: np.ndarray):
    """OpenVINO CPU, 1 stream, 1 thread, f32 inference precision forced (it picks bf16 on
    a CPU with AMX/AVX512-BF16, which would not be an fp32 figure). The int8 model is the
    QDQ ONNX itself, through openvino.convert_model (its Q/DQ pairs become FakeQuantize
    and run as int8): the same path as convert/openvino.py with a QDQ source."""
    import openvino as ov

    cfg = {"NUM_STREAMS": "1", "INFERENCE_NUM_THREADS": "1",
           "INFERENCE_PRECISION_HINT": "f32", "PERFORMANCE_HINT": "LATENCY"}
    compiled = ov.Core().compile_model(ov.convert_model(str(model)), "CPU", cfg)
    got = str(compiled.get_property("INFERENCE_PRECISION_HINT"))
    if "f32" not in got and "float32" not in got:
        raise RuntimeError(f"OpenVINO ignored INFERENCE_PRECISION_HINT f32 (runs {got})")
    req = compiled.create_infer_request()
    req.set_input_tensor(ov.Tensor(np.ascontiguousarray(x[:1], np.float32)))
    return _timer(req.infer)


def _litert_peer(onnx_path: Path, calib: np.ndarray, work: Path, prec: str):
    """LiteRT with its default XNNPACK delegate, 1 thread; returns (timer, .tflite path)."""
    tfl = _tflite_int8(onnx_path, calib[:16], work, prec)
    return _timer(_litert(tfl).invoke), tfl


def _peers(prec: str, onnx_path: Path, src: Path, calib: np.ndarray, work: Path):
    """{peer: timer or "skipped: why"} and the LiteRT model (or None)."""
    peers: dict = {}
    tfl = None
    for name, make in (("litert", lambda: _litert_peer(onnx_path, calib, work / "tfl", prec)),
                       ("ort", lambda: (_ort_peer(src, calib), None)),
                       ("openvino", lambda: (_openvino_peer(src, calib), None))):
        try:
            peers[name], t = make()
            tfl = tfl or t
        except ImportError as e:
            peers[name] = f"{e.name or e} not installed"
        except Exception as e:  # noqa: BLE001 - a peer we cannot build or run is a skip
            peers[name] = f"{type(e).__name__}: {e}"[:300]
    return peers, tfl


def _rounds(binary: Path, cwd: Path, peers: dict, runs: int, rounds: int) -> dict:
    """C and every peer in alternating rounds (C, then each peer, then C again...), so a
    slow spell of this shared machine hits all of them. Each side first runs as many
    untimed inferences as it times (see _head_to_head). Per peer: the median over rounds
    of C p50 / peer p50, each pair measured in the same round."""
    live = {k: v for k, v in peers.items() if callable(v)}
    c50, c_min, p50, p_min = [], [], {k: [] for k in live}, {k: [] for k in live}
    for _ in range(rounds):
        c = run.run_bench(binary, ["--input", "in.raw", "--runs", str(runs), "--warmup",
                                   str(runs)], cwd=cwd)["latency_ms"]
        c50.append(c["p50"])
        c_min.append(c["min"])
        for k, timer in live.items():
            timer(runs)
            lat = timer(runs)
            p50[k].append(float(np.median(lat)))
            p_min[k].append(float(lat.min()))
    out = {"rounds": rounds, "runs_per_round": runs, "c_p50_ms": float(np.median(c50)),
           "c_min_ms": min(c_min), "c_per_round_p50_ms": [round(v, 4) for v in c50]}
    for k, v in peers.items():
        if not callable(v):
            out[k] = {"skipped": v}  # the reason
            continue
        out[k] = {"p50_ms": float(np.median(p50[k])), "min_ms": min(p_min[k]),
                  "ratio_c_over": round(float(np.median(np.array(c50) / np.array(p50[k]))), 3),
                  "ratio_min_c_over": round(min(c_min) / min(p_min[k]), 3),
                  "per_round_p50_ms": [round(x, 4) for x in p50[k]]}
    return out


def _profile(binary: Path, cwd: Path, runs: int, rounds: int) -> dict:
    """Per-step time of the C runtime (edgesmith_bench --profile): for each step its
    fastest single run over ``rounds`` runs of the binary (``min_us``: the least disturbed
    by the other load on this machine, where a mean takes in every interruption); the five
    slowest steps, and the sum by op, in microseconds."""
    best: dict[int, tuple[str, str, float]] = {}
    for _ in range(rounds):
        res = run.run_bench(binary, ["--input", "in.raw", "--runs", str(runs), "--warmup",
                                     str(runs), "--profile"], cwd=cwd)
        for st in res["steps"]:
            old = best.get(st["index"])
            if old is None or st["min_us"] < old[2]:
                best[st["index"]] = (st["op"], st.get("name", ""), st["min_us"])
    by_op: dict[str, float] = {}
    for op, _, us in best.values():
        by_op[op] = by_op.get(op, 0.0) + us
    total = sum(by_op.values())
    slow = sorted(best.items(), key=lambda kv: -kv[1][2])[:5]
    return {"total_us": round(total, 1),
            "slowest_steps": [{"index": i, "op": op, "name": nm, "us": round(us, 1),
                               "share": round(us / total, 3) if total else None}
                              for i, (op, nm, us) in slow],
            "by_op_us": {k: round(v, 1) for k, v in sorted(by_op.items(),
                                                           key=lambda kv: -kv[1])}}


def int8_peak() -> dict:
    """The measured single-core int8 MAC peak of this CPU: benchmarks/int8_peak.c (a loop
    of independent vpdpbusd, or AVX2 vpmaddubsw without VNNI), built here and run once."""
    import subprocess

    src = Path(__file__).with_name("int8_peak.c")
    with tempfile.TemporaryDirectory(prefix="es_peak_") as tmp:
        exe = Path(tmp) / "int8_peak"
        p = subprocess.run(["cc", "-std=c99", "-O2", "-march=native", str(src), "-o", str(exe)],
                           capture_output=True, text=True)
        if p.returncode != 0:
            return {"skipped": f"int8_peak.c did not build: {p.stderr[-300:]}"}
        out = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    res = json.loads(out.stdout)
    res.pop("sink", None)
    return res


def tflite_int8_input(src: Path, dst: Path) -> bool:
    """Write ``src`` to ``dst`` taking its input quantized, as a TFLite model converted with
    an int8 input type does: each float graph input read only by a QUANTIZE gives way to
    that QUANTIZE's int8 output, and the float tensor left over shrinks to one element
    (tensor indices stay as they are). The counterpart of the C option ``input: int8``,
    for TFLite Micro's arena; False and no file when no input is quantized so."""
    from ai_edge_litert import schema_py_generated as schema

    model = tflite_model(src)
    codes = [builtin_code(oc) for oc in model.operatorCodes or []]
    g = model.subgraphs[0]
    folded = False
    for k, op in reversed(list(enumerate(g.operators))):
        x = int(op.inputs[0])
        if (codes[op.opcodeIndex] != schema.BuiltinOperator.QUANTIZE or x not in list(g.inputs)
                or g.tensors[x].type != schema.TensorType.FLOAT32
                or sum(x in list(o.inputs) for o in g.operators) != 1):
            continue
        g.inputs[list(g.inputs).index(x)] = op.outputs[0]
        g.tensors[x].shape, g.tensors[x].shapeSignature = [1], None
        del g.operators[k]
        folded = True
    if folded:
        write_tflite(model, dst)
    return folded


def _tflm_arena_of(tfl: Path) -> dict:
    """TFLite Micro's arena for the int8 .tflite LiteRT ran (its RecordingMicroAllocator,
    after AllocateTensors: no invoke needed, which would take seconds on its reference
    kernels at 224x224). Where TFLM refuses an op that has a stand-in (TFLM_STAND_INS), the
    arena is that of the model with the stand-in, and the result names it ("stand_ins")
    with TFLM's own message for the model as it is ("as_is")."""
    try:
        from tflite_micro.python.tflite_micro import runtime
    except ImportError:
        return {"skipped": "tflite-micro not installed (pip install -e '.[bench]')"}
    def load(path: Path):  # (interpreter or its exception, TFLM's lines about ops)
        it, text = _c_output(lambda: runtime.Interpreter.from_file(str(path)))
        return it, " ".join(ln for ln in text.splitlines() if "op" in ln.lower())[:200]

    it, why = load(tfl)
    if not isinstance(it, Exception):
        return _tflm_arena(it)
    stand = tfl.with_name(tfl.stem + "_tflm_stand_ins.tflite")
    subs = tflite_stand_ins(tfl, stand, TFLM_STAND_INS)
    if subs:  # an op TFLM lacks, with a stand-in that leaves the arena as it is
        it2, why2 = load(stand)
        if not isinstance(it2, Exception):
            return {**_tflm_arena(it2), "stand_ins": subs, "as_is": why or str(it)}
        it, why = it2, why2
    # an op TFLM lacks and no stand-in: a skip, not a figure
    return {"skipped": f"TFLite Micro: {type(it).__name__}: {it}; {why}"[:300]}


def _geomean(report: dict, nets: list[str]) -> dict:
    """Geometric mean over the nets of each ratio that every net has a figure for (nets
    missing one are named)."""
    out: dict = {}
    for key in ("ratio_c_over_litert", "ratio_c_over_ort", "ratio_c_over_openvino"):
        for prec in ("int8", "fp32"):
            vals = {n: report[n][key].get(prec) for n in nets}
            have = [v for v in vals.values() if isinstance(v, float)]
            out.setdefault(key, {})[prec] = (
                round(float(np.exp(np.mean(np.log(have)))), 3) if have else None)
            missing = [n for n, v in vals.items() if not isinstance(v, float)]
            if missing:
                out[key][f"{prec}_missing"] = missing
    pct = [report[n]["c_int8_pct_of_peak"] for n in nets
           if isinstance(report[n].get("c_int8_pct_of_peak"), float)]
    out["c_int8_pct_of_peak"] = round(float(np.exp(np.mean(np.log(pct)))), 1) if pct else None
    return out


def bench_net(item: str, work: Path, runs: int, rounds: int) -> dict:
    """One --nets entry: C int8 and fp32 against LiteRT, onnxruntime, OpenVINO."""
    name, _, size = item.partition(":")
    size = int(size or 224)
    onnx_path, calib, kind, _ = zoo_net(name, size, work, n_calib=16)
    macs = count_macs(onnx_path)
    qdq = _qdq(onnx_path, calib[:16], work / f"{name}_{size}_qdq.onnx")
    r: dict = {"weights": kind, "input": [1, 3, size, size],
               "classes": 10 if kind == "trained" else 1000, "macs": macs,
               "ratio_c_over_litert": {}, "ratio_c_over_ort": {}, "ratio_c_over_openvino": {}}
    for prec, src in (("int8", qdq), ("fp32", onnx_path)):
        out = work / f"{name}_{size}_{prec}"
        gen = codegen.from_onnx(src, out, precision=prec, cflags="-O3 -march=native")
        b = run.build(out)
        calib[:1].astype("<f4").tofile(out / "in.raw")
        peers, tfl = _peers(prec, onnx_path, src, calib, work / f"{name}_{size}_{prec}_peers")
        h2h = _rounds(b, out, peers, runs, rounds)
        for peer in ("litert", "ort", "openvino"):
            r[f"ratio_c_over_{peer}"][prec] = h2h[peer].get(
                "ratio_c_over", f"skipped: {h2h[peer].get('skipped')}")
        c_gmac = macs / (h2h["c_p50_ms"] * 1e6)
        r[prec] = {"c_gmac_per_s": round(c_gmac, 1), "arena_bytes": gen.plan.arena_bytes,
                   "arena_lower_bound_bytes": gen.plan.lower_bound_bytes,
                   "rounds": h2h, "c_profile": _profile(b, out, runs, min(rounds, 2))}
        if prec == "int8":
            r["c_int8_gmac_per_s"] = round(c_gmac, 1)
            r["arena_int8"] = _arena_vs_tflm(gen.plan.arena_bytes, tfl)
            # the C entry points that spare the float input's slot (int8_input.py; generated
            # only, not built): input: float_in_place, its int8 copy written over the float
            # input, against the same .tflite; input: int8, both taking the input quantized
            # as microcontroller deployments do, against the int8-input .tflite
            t8 = tfl.with_name(tfl.stem + "_int8_input.tflite") if tfl else None
            for opt, key, other in (
                    ("float_in_place", "arena_int8_in_place", tfl),
                    ("int8", "arena_int8_input",
                     t8 if t8 and tflite_int8_input(tfl, t8) else None)):
                c = codegen.from_onnx(src, work / f"{name}_{size}_int8_{opt}", precision=prec,
                                      cflags="-O3 -march=native", input=opt)
                r[key] = _arena_vs_tflm(c.plan.arena_bytes, other)
    return r


def _arena_vs_tflm(c_bytes: int, tfl: Path | None) -> dict:
    """C's arena against TFLite Micro's for the same model (None: no .tflite to compare)."""
    tflm = _tflm_arena_of(tfl) if tfl else {"skipped": "no int8 .tflite model"}
    return {"c_bytes": c_bytes, "tflm": tflm, "c_over_tflm_total": (
        round(c_bytes / tflm["total"], 3) if tflm.get("total") else None)}


def pin(cpu: int) -> int | None:
    """Pin this process, and so every binary it starts from now on, to one CPU: ``cpu``, or
    the lowest allowed one when it is -1 (the default); None where the OS has no affinity
    call or ``cpu`` is -2 (--cpu -2: no pinning)."""
    import os

    if cpu == -2 or not hasattr(os, "sched_setaffinity"):
        return None
    allowed = sorted(os.sched_getaffinity(0))
    chosen = min(allowed) if cpu == -1 else cpu
    if chosen not in allowed:
        raise SystemExit(f"--cpu {cpu}: this process may run on CPUs {allowed} only")
    os.sched_setaffinity(0, {chosen})
    return chosen


def bench_nets(nets: list[str], runs: int, rounds: int) -> dict:
    """--nets: each zoo network in C (int8, fp32) against its peers, the int8 peak, the
    geometric means."""
    import os
    import platform

    peak = int8_peak()
    report: dict = {"cflags": "-O3 -march=native", "threads": 1, "cpu": platform.processor()
                    or platform.machine(), "loadavg_at_start": [round(v, 2) for v in
                                                                os.getloadavg()],
                    "int8_peak": peak,
                    "peers": {"litert": "ai-edge-litert, XNNPACK delegate (default), 1 thread",
                              "ort": "onnxruntime CPU EP, 1 intra-op thread, ORT_ENABLE_ALL; "
                                     "int8 = the QDQ model C is generated from",
                              "openvino": "OpenVINO CPU, 1 stream, 1 thread, "
                                          "INFERENCE_PRECISION_HINT f32; int8 = the QDQ ONNX "
                                          "via openvino.convert_model"},
                    "timing": "p50 per round, median over alternating rounds; peers timed "
                              "from Python around one call (C times itself in C)"}
    with tempfile.TemporaryDirectory(prefix="es_nets_") as tmp:
        for item in nets:
            report[item] = bench_net(item, Path(tmp), runs, rounds)
            # each net's figures as soon as they exist: a long run stopped part way keeps them
            print(f"{item}: {json.dumps(report[item])}", file=sys.stderr, flush=True)
    report["loadavg_at_end"] = [round(v, 2) for v in os.getloadavg()]
    # measured again at the end: the higher of the two is the peak (a busy spell of this
    # shared machine can only lower a figure)
    end = int8_peak()
    report["int8_peak_at_end"] = end
    best = max(peak.get("gmac_per_s") or 0.0, end.get("gmac_per_s") or 0.0)
    report["int8_peak_gmac_per_s"] = best or None
    for item in nets:
        report[item]["c_int8_pct_of_peak"] = (
            round(100 * report[item]["c_int8_gmac_per_s"] / best, 1) if best else None)
    report["geomean"] = _geomean(report, nets)
    return report


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=200, help="timed runs (per round)")
    ap.add_argument("--rounds", type=int, default=5,
                    help="alternating C / LiteRT rounds for the latency ratio")
    ap.add_argument("--cpu", type=int, default=-1,
                    help="the CPU every peer and every C binary runs on (default -1: the "
                         "lowest this process may use; -2: no pinning)")
    ap.add_argument("--nets", default="",
                    help="zoo networks as name:size, comma-separated (e.g. "
                         "mobilenetv2:96,resnet18:224), instead of the digits/MobileNetV2 "
                         f"report; names: {', '.join(ZOO_NETS)}")
    args = ap.parse_args()
    cpu = pin(args.cpu)
    if args.nets:
        report = bench_nets([n for n in args.nets.split(",") if n], args.runs, args.rounds)
        report["pinned_cpu"] = cpu
        print(json.dumps(report, indent=1))
        return
    report = {"pinned_cpu": cpu}
    floor = _litert_invoke_floor_ms(args.runs)
    with tempfile.TemporaryDirectory(prefix="es_bench_") as tmp:
        work = Path(tmp)
        for name, onnx_path, calib, x in _models(work):
            r: dict = {}
            qdq = _qdq(onnx_path, calib[:64], work / f"{name}_qdq.onnx")
            for prec, src in (("fp32", onnx_path), ("int8", qdq)):
                out = work / f"{name}_{prec}"
                gen = codegen.from_onnx(src, out, precision=prec, cflags="-O3 -march=native")
                b = run.build(out)
                x.astype("<f4").tofile(out / "in.raw")
                res = run.run_bench(b, ["--input", "in.raw", "--runs", str(args.runs),
                                        "--warmup", "10"], cwd=out)
                r[prec] = {"c_latency_ms": res["latency_ms"], "peak_rss_kb": res["peak_rss_kb"],
                           **gen.plan.figures(), "weights_bytes": gen.weights_bytes}
            c_ms = r["int8"]["c_latency_ms"]["p50"]
            try:
                tfl = _tflite_int8(onnx_path, calib, work / name)
            except Exception as e:  # noqa: BLE001 - a peer we cannot build is a skip
                r["litert"] = {"skipped": f"no int8 tflite model: {type(e).__name__}: {e}"[:300]}
                tfl = None
            if tfl is not None:
                out = work / f"{name}_int8"
                h2h = _head_to_head(out / "edgesmith_bench", out, _litert(tfl), args.runs,
                                    args.rounds)
                r["litert"] = {"int8_p50_ms": h2h["litert_p50_ms"],
                               "ratio_c_over_litert": h2h["ratio_c_over_litert"],
                               "head_to_head": h2h, "invoke_floor_ms": floor,
                               "ratio_c_over_litert_less_floor": (
                                   h2h["c_p50_ms"] / (h2h["litert_p50_ms"] - floor)
                                   if isinstance(floor, float) else None),
                               "threads": 1,
                               "delegate": "XNNPACK (LiteRT default)",
                               "python_call_floor_ms": _python_call_overhead_ms(args.runs)}
                try:
                    import tflite_micro  # noqa: F401
                except ImportError:
                    print("tflite-micro not installed", file=sys.stderr)
                    r["tflm"] = {"skipped": "tflite-micro not installed"}
                else:
                    try:
                        tm, arena = _tflm(tfl, args.runs)
                        c_arena = r["int8"]["arena_bytes"]
                        r["tflm"] = {"int8_p50_ms": tm, "speedup_c_vs_tflm": tm / c_ms,
                                     "arena_total_bytes": arena["total"],
                                     "arena_head_bytes": arena["head"],
                                     "c_arena_over_tflm_total": (
                                         c_arena / arena["total"] if arena["total"] else None),
                                     "c_arena_over_tflm_head": (
                                         c_arena / arena["head"] if arena["head"] else None)}
                    except Exception as e:  # noqa: BLE001
                        r["tflm"] = {"skipped": f"{type(e).__name__}: {e}"[:300]}
            report[name] = r
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
