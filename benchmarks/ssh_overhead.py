"""Does the SSH harness measure the model, not SSH? Bench one build over SSH to 127.0.0.1
and with ``--local``, interleaved, and compare the per-target median latencies (target:
within 10 %); report the fixed cost of an SSH bench session (connect, upload + verify,
cleanup) in seconds. Prints one JSON document.

    .venv/bin/python benchmarks/ssh_overhead.py [--build DIR] [--runs 300] [--repeats 3]

Without ``--build`` it trains the digits CNN briefly and runs ``edgesmith build`` (host
profile; onnx, tflite and c at fp32) in a temp folder;
with it, the given build's manifest gains the "local" and "sshd-loopback" bench entries.
It starts its own throw-away sshd on 127.0.0.1 (needs root and openssh-server).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "devices"))

from conftest import _start, make_demo_build, train_digits_ckpt  # noqa: E402  (test fixtures)

from edgesmith.devices.bench import Device, bench  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", type=Path, default=None)
    ap.add_argument("--runs", type=int, default=300)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--formats", default="onnx,tflite,c")
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="edgesmith-ssh-overhead-"))
    try:
        build = args.build or make_demo_build(
            tmp / "build", train_digits_ckpt(tmp / "digits.pt"),
            tuple(f"{f}:fp32" for f in args.formats.split(",")))
        server = _start(tmp / "sshd", tmp / "sshd.log")
        try:
            local_p50: dict[str, list[float]] = {}
            ssh_p50: dict[str, list[float]] = {}
            overhead: dict[str, list[float]] = {"connect": [], "upload": [], "cleanup": []}
            duration = {"local": [], "ssh": []}
            for _ in range(args.repeats):
                for kind, device in (("local", Device("local")),
                                     ("ssh", Device("sshd-loopback", ssh=server.ssh()))):
                    run = bench(build, [device], runs=args.runs, warmup=args.warmup)
                    run.raise_for_status()
                    d = run.devices[device.name]
                    duration[kind].append(d["duration_s"])
                    sink = local_p50 if kind == "local" else ssh_p50
                    for t in d["targets"]:
                        sink.setdefault(t["name"], []).append(t["latency_ms"]["p50"])
                    if kind == "ssh":
                        for k in overhead:
                            overhead[k].append(d["overhead_s"][k])
        finally:
            server.kill()
        targets = {}
        for name in local_p50:
            lo, hi = statistics.median(local_p50[name]), statistics.median(ssh_p50[name])
            targets[name] = {"local_p50_ms": round(lo, 5), "ssh_p50_ms": round(hi, 5),
                             "ssh_over_local": round(hi / lo, 4),
                             "within_10pct": abs(hi / lo - 1) <= 0.10,
                             "local_p50_each": [round(v, 5) for v in local_p50[name]],
                             "ssh_p50_each": [round(v, 5) for v in ssh_p50[name]]}
        fixed = {k: round(statistics.median(v), 4) for k, v in overhead.items()}
        fixed["session_total"] = round(sum(fixed.values()), 4)
        fixed["ssh_minus_local_duration"] = round(
            statistics.median(duration["ssh"]) - statistics.median(duration["local"]), 4)
        print(json.dumps({
            "build": str(build), "runs": args.runs, "warmup": args.warmup,
            "repeats": args.repeats, "targets": targets,
            "all_within_10pct": all(t["within_10pct"] for t in targets.values()),
            "fixed_overhead_s": fixed,
            "duration_s": {k: round(statistics.median(v), 3) for k, v in duration.items()},
        }, indent=2))
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
