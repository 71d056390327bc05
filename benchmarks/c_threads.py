"""The C runtime with ``options: {threads: N}`` against the same network with one thread.

    .venv/bin/python benchmarks/c_threads.py --nets mobilenetv2:96,resnet18:224 \\
        --threads 2 --rounds 7 --runs 30 --out /tmp/c_threads.json   # -O3 -march=native

Each zoo network (examples/zoo) is built with random weights and 1000 classes, calibrated
on random normal data (a speed figure, not an accuracy one), lowered to int8 C twice (one
thread, N threads), and both ``edgesmith_bench --no-power`` binaries run in alternating
rounds, so load from other processes on a shared machine falls on both alike; the load
average before and after is recorded with the figures. Outputs of the two builds are
checked equal on one input first.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

ZOO = {"mobilenetv2": "mobilenetv2.py", "resnet18": "resnet18.py",
       "mobilenetv3_small": "mobilenetv3.py", "efficientnet_b0": "efficientnet.py"}


def _zoo(name: str):
    spec = importlib.util.spec_from_file_location(f"zoo_{name}",
                                                  ROOT / "examples" / "zoo" / ZOO[name])
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _qdq_model(name: str, size: int, work: Path) -> Path:
    """Random-weight QDQ ONNX of a zoo net at ``size`` (calibrated on 16 random inputs)."""
    import torch

    from tests.targets._helpers import _qdq, export

    torch.manual_seed(0)
    model = _zoo(name).build(num_classes=1000).eval()
    x = np.random.default_rng(0).standard_normal((16, 3, size, size)).astype(np.float32)
    onnx_path = export(model, torch.from_numpy(x[:1]), work / f"{name}_{size}.onnx")
    return _qdq(onnx_path, x, work / f"{name}_{size}_qdq.onnx")


def _p50(folder: Path, fin: Path, runs: int) -> float:
    from edgesmith.targets import run

    res = run.run_bench(folder / "edgesmith_bench",
                        ["--weights", str(folder / "weights.bin"), "--input", str(fin),
                         "--runs", str(runs), "--warmup", "3", "--no-power"], cwd=folder)
    return float(res["latency_ms"]["p50"])


def bench_net(item: str, threads: int, rounds: int, runs: int, work: Path,
              cflags: str) -> dict:
    from edgesmith.targets import codegen, run

    name, size = item.split(":")
    src = _qdq_model(name, int(size), work)
    folders = {}
    for t in (1, threads):
        folders[t] = work / f"{name}_{size}_t{t}"
        codegen.from_onnx(src, folders[t], precision="int8", threads=t, cflags=cflags)
        run.build(folders[t])
    (ishape,), _ = run.io_shapes(folders[1])
    x = np.random.default_rng(1).standard_normal(ishape).astype(np.float32)
    same = bool(np.array_equal(run.run(folders[1], x), run.run(folders[threads], x)))
    fin = work / f"{name}_{size}_in.raw"
    x.astype("<f4").tofile(fin)
    split = (folders[threads] / "model.c").read_text().count("es_parallel_for(")
    load0 = os.getloadavg()
    per_round = {1: [], threads: []}
    for _ in range(rounds):
        for t in (1, threads):  # alternating: one round of each, then the next
            per_round[t].append(_p50(folders[t], fin, runs))
    load1 = os.getloadavg()
    med = {t: float(np.median(v)) for t, v in per_round.items()}
    return {"network": f"{name} {size}x{size}, int8, random weights, batch 1",
            "outputs_equal": same, "steps_split": split,
            "steps": codegen_steps(folders[1]),
            "p50_ms_per_round": {str(t): v for t, v in per_round.items()},
            "median_p50_ms": {str(t): v for t, v in med.items()},
            f"speedup_{threads}_over_1": med[1] / med[threads],
            "loadavg_1_5_15_before": load0, "loadavg_1_5_15_after": load1}


def codegen_steps(folder: Path) -> int:
    import re

    return int(re.search(r"#define ES_NUM_STEPS (\d+)", (folder / "model.h").read_text())[1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nets", default="mobilenetv2:96,resnet18:224")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--cflags", default="-O3 -march=native",
                    help="the fast kernels need the host's ISA (VNNI where it has it)")
    a = ap.parse_args()
    report = {"cpus": os.cpu_count(), "threads": a.threads, "cflags": a.cflags, "rounds": a.rounds,
              "runs_per_round": a.runs, "started": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                 time.gmtime()), "nets": {}}
    with tempfile.TemporaryDirectory(prefix="es_c_threads_") as tmp:
        for item in a.nets.split(","):
            report["nets"][item] = bench_net(item, a.threads, a.rounds, a.runs, Path(tmp),
                                              a.cflags)
            print(json.dumps({item: report["nets"][item]}), flush=True)
    if a.out:
        a.out.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
