"""C runtime vs peers, one run: INT8 latency vs LiteRT (XNNPACK, 1 thread) and TFLite
Micro, arena vs TFLM's, planner efficiency, peak RSS. Prints one JSON document.

    .venv/bin/python benchmarks/c_runtime.py [--runs 200] [--rounds 5]
    .venv/bin/python benchmarks/c_runtime.py --nets mobilenetv2:96,resnet18:224 [--profile]

--nets benchmarks zoo networks (examples/zoo) at the given input sizes instead, with 1000
classes, random weights, calibrated on random data (fine for speed, meaningless for
accuracy): C int8 and fp32 against LiteRT int8 and fp32 in alternating rounds, with each
network's MACs and the C runtime's GMAC/s; --profile adds the C runtime's per-step times
summed by op (edgesmith_bench --profile, the smallest mean over rounds).

The C / LiteRT ratio comes from alternating rounds (see _head_to_head): on a shared
machine a single back-to-back pair can differ by 1.5x from one minute to the next.

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


def _tflm_arena(it) -> dict:
    """TFLM's RecordingMicroAllocator figures, parsed from print_allocations() (it writes
    from C++ to fd 1/2, so both are redirected into a pipe around the call)."""
    import os
    import re

    sys.stdout.flush()
    sys.stderr.flush()
    r, w = os.pipe()
    saved = [os.dup(1), os.dup(2)]
    os.dup2(w, 1)
    os.dup2(w, 2)
    try:
        it.print_allocations()
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        os.close(w)
        for fd in saved:
            os.close(fd)
    text = b""
    while chunk := os.read(r, 65536):
        text += chunk
    os.close(r)
    out = {}
    for key in ("total", "head", "tail"):
        m = re.search(rf"Arena allocation {key} (\d+) bytes", text.decode(errors="replace"))
        out[key] = int(m.group(1)) if m else None
    return out


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


def _zoo_net(name: str, size: int, work: Path):
    """(fp32 ONNX, calibration samples) of a zoo network with 1000 classes and random
    weights; calibrated on random normal data, which is all a speed figure needs."""
    import importlib.util

    import torch

    if name not in ZOO_NETS:
        raise SystemExit(f"--nets: unknown network {name!r}; known: {', '.join(ZOO_NETS)}")
    spec = importlib.util.spec_from_file_location(f"zoo_{name}",
                                                  ROOT / "examples" / "zoo" / ZOO_NETS[name])
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    x = np.random.default_rng(0).standard_normal((32, 3, size, size)).astype(np.float32)
    onnx_path = export(mod.build(num_classes=1000).eval(), torch.from_numpy(x[:1]),
                       work / f"{name}_{size}.onnx")
    return onnx_path, x


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


def _profile(binary: Path, cwd: Path, runs: int, rounds: int) -> dict:
    """Per-op time of the C runtime (edgesmith_bench --profile): for each step the smallest
    mean over ``rounds`` runs of the binary, summed by op, in microseconds."""
    best: dict[int, tuple[str, float]] = {}
    for _ in range(rounds):
        res = run.run_bench(binary, ["--input", "in.raw", "--runs", str(runs), "--warmup",
                                     str(runs), "--profile"], cwd=cwd)
        for st in res["steps"]:
            old = best.get(st["index"])
            if old is None or st["mean_us"] < old[1]:
                best[st["index"]] = (st["op"], st["mean_us"])
    by_op: dict[str, float] = {}
    for op, us in best.values():
        by_op[op] = by_op.get(op, 0.0) + us
    total = sum(by_op.values())
    return {"total_us": round(total, 1), "by_op_us": {
        k: round(v, 1) for k, v in sorted(by_op.items(), key=lambda kv: -kv[1])}}


def bench_nets(nets: list[str], runs: int, rounds: int, profile: bool) -> dict:
    """--nets: each zoo network in C (int8, fp32) against LiteRT (int8, fp32)."""
    report: dict = {"weights": "random weights, calibrated on random data",
                    "cflags": "-O3 -march=native", "litert_threads": 1}
    with tempfile.TemporaryDirectory(prefix="es_nets_") as tmp:
        work = Path(tmp)
        for item in nets:
            name, _, size = item.partition(":")
            onnx_path, calib = _zoo_net(name, int(size or 224), work)
            macs = count_macs(onnx_path)
            qdq = _qdq(onnx_path, calib[:16], work / f"{item}_qdq.onnx".replace(":", "_"))
            r: dict = {"macs": macs}
            for prec, src in (("int8", qdq), ("fp32", onnx_path)):
                out = work / f"{name}_{size}_{prec}"
                codegen.from_onnx(src, out, precision=prec, cflags="-O3 -march=native")
                b = run.build(out)
                calib[:1].astype("<f4").tofile(out / "in.raw")
                try:
                    tfl = _tflite_int8(onnx_path, calib[:16], work / f"{name}_{size}", prec)
                except Exception as e:  # noqa: BLE001 - a peer we cannot build is a skip
                    r[prec] = {"skipped": f"no {prec} tflite model: {e}"[:300]}
                    continue
                h2h = _head_to_head(b, out, _litert(tfl), runs, rounds)
                r[prec] = {"ratio_c_over_litert": round(h2h["ratio_c_over_litert"], 3),
                           "c_gmac_per_s": round(macs / (h2h["c_p50_ms"] * 1e6), 1),
                           "litert_gmac_per_s": round(macs / (h2h["litert_p50_ms"] * 1e6), 1),
                           "head_to_head": h2h}
                if profile:
                    r[prec]["c_profile"] = _profile(b, out, runs, rounds)
            report[item] = r
    return report


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=200, help="timed runs (per round)")
    ap.add_argument("--rounds", type=int, default=5,
                    help="alternating C / LiteRT rounds for the latency ratio")
    ap.add_argument("--nets", default="",
                    help="zoo networks as name:size, comma-separated (e.g. "
                         "mobilenetv2:96,resnet18:224), instead of the digits/MobileNetV2 "
                         f"report; names: {', '.join(ZOO_NETS)}")
    ap.add_argument("--profile", action="store_true",
                    help="with --nets: the C runtime's per-step times, summed by op")
    args = ap.parse_args()
    if args.nets:
        print(json.dumps(bench_nets([n for n in args.nets.split(",") if n], args.runs,
                                    args.rounds, args.profile), indent=1))
        return
    report = {}
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
