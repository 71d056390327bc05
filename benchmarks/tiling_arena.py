"""Patch-based execution (targets/tiling.py) on MobileNetV2 1.0, one run: the tensor-level
arena lower bound, the tiled arena and their ratio, the extra MACs, and latency tiled vs
untiled in alternating rounds. Prints one JSON document.

    .venv/bin/python benchmarks/tiling_arena.py [--size 96] [--rounds 5] [--runs 20]

Workload: examples/zoo/mobilenetv2.py, 1000 classes, random weights (seed 0), int8
calibrated on 8 random inputs (speed and memory only, no accuracy), kernels picked for and
built with ``-O3 -march=native`` (on a VNNI CPU: the stem kernel, the dot GEMM, conv + Add
fused). Per precision it builds the untiled model and the tiled ones the
planner picks for a budget of half the lower bound and for ``tiling: auto``; each round
runs every build once (``edgesmith_bench --runs N``) in turn, so a load change on a shared
machine hits all alike; the figure is the median over rounds of each round's p50, with
the load average beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from edgesmith.targets import codegen, run  # noqa: E402
from edgesmith.targets.ir import lower  # noqa: E402
from edgesmith.targets.isa import macros  # noqa: E402
from edgesmith.targets.planner import plan  # noqa: E402
from edgesmith.targets.tiling import apply  # noqa: E402
from tests.targets._helpers import _qdq, export  # noqa: E402

CFLAGS = "-O3 -march=native"


def _models(work: Path, size: int) -> dict[str, Path]:
    import torch

    from examples.zoo.mobilenetv2 import build

    fp32 = export(build(num_classes=1000), torch.randn(1, 3, size, size), work / "mnv2.onnx")
    calib = np.random.default_rng(0).standard_normal((8, 3, size, size)).astype(np.float32)
    return {"fp32": fp32, "int8": _qdq(fp32, calib, work / "mnv2_q.onnx")}


def _builds(src: Path, precision: str, work: Path) -> dict[str, dict]:
    """untiled, tiled for half the bound, tiled auto: folder and plan figures of each."""
    out = {}
    g0 = lower(src, precision, macros("cc", CFLAGS))  # the kernels the build's cflags get
    p0 = plan(g0)
    for tag, option, budget in (("untiled", "off", None),
                                ("tiled_half_bound", None, p0.lower_bound_bytes // 2),
                                ("tiled_auto", "auto", None)):
        g, p = apply(g0, plan(g0), option, budget)
        folder = work / f"{precision}_{tag}"
        codegen.generate(g, p, folder, cflags=CFLAGS)
        run.build(folder)
        out[tag] = {"folder": folder, "arena_bytes": p.arena_bytes,
                    "lower_bound_untiled_bytes": p0.lower_bound_bytes, "tiling": p.tiling}
    return out


def _p50(folder: Path, runs: int) -> float:
    r = subprocess.run(["./edgesmith_bench", "--weights", "weights.bin", "--runs", str(runs),
                        "--warmup", "2", "--no-power"], cwd=folder, capture_output=True,
                       text=True, check=True)
    return json.loads(r.stdout.strip().splitlines()[-1])["latency_ms"]["p50"]


def _rounds(builds: dict[str, dict], rounds: int, runs: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {k: [] for k in builds}
    loads = []
    for _ in range(rounds):
        loads.append(os.getloadavg()[0])
        for tag, b in builds.items():
            times[tag].append(_p50(b["folder"], runs))
    times["load_avg_1min"] = loads
    return times


def _figures(builds: dict[str, dict], times: dict[str, list[float]]) -> dict:
    base = statistics.median(times["untiled"])
    res = {"load_avg_1min": times["load_avg_1min"]}
    for tag, b in builds.items():
        t = b["tiling"] or {}
        med = statistics.median(times[tag])
        res[tag] = {
            "arena_bytes": b["arena_bytes"], "lower_bound_untiled_bytes":
                b["lower_bound_untiled_bytes"],
            "ratio_to_lower_bound": round(b["arena_bytes"] / b["lower_bound_untiled_bytes"], 4),
            "patches": t.get("patches"), "split": t.get("split"), "layers": t.get("layers"),
            "halo_px": t.get("halo_px"), "extra_macs": t.get("extra_macs", 0),
            "extra_macs_pct": t.get("extra_macs_pct", 0.0),
            "p50_ms_per_round": [round(x, 3) for x in times[tag]],
            "p50_ms_median": round(med, 3),
            "latency_over_untiled": round(med / base, 4)}
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=96)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--precisions", default="int8,fp32")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        work = Path(d)
        models = _models(work, a.size)
        doc = {"network": f"MobileNetV2 1.0, {a.size}x{a.size}, 1000 classes, random weights",
               "cflags": CFLAGS, "cpu": _cpu(), "rounds": a.rounds, "runs_per_round": a.runs}
        for prec in a.precisions.split(","):
            builds = _builds(models[prec], prec, work)
            doc[prec] = _figures(builds, _rounds(builds, a.rounds, a.runs))
    print(json.dumps(doc, indent=1))


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip() + f", {os.cpu_count()} cores"
    except OSError:
        pass
    return "unknown"


if __name__ == "__main__":
    main()
