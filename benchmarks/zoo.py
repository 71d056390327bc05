"""Build every trained zoo model for a profile (``host``) and print one table.

    .venv/bin/python benchmarks/zoo.py [--only NAME ...] [--target FORMAT[:PRECISION] ...]
                                       [--json] [--profile host]

For each checkpoint ``examples/zoo/train.py`` left in the cache ($XDG_CACHE_HOME/edgesmith/
zoo), runs the real ``edgesmith build`` (its own process, on the same data splits the
model was trained and validated on) and reads the published ``manifest.json``: one row per
model x target with status, top-1 of the FP32 reference and of the artifact, the drop,
size, host p50 latency and build time (``--skip-unsupported``: a target that cannot
express a node is a ``skipped`` row and the others still build). ``--target`` builds only
those of the profile's targets (``build --target``: a full host build of a large CNN takes
minutes per format on a shared CPU). ``--json`` prints the rows as a list of ``{model,
target, precision, status, accuracy, reference_accuracy, drop_pt, drop_ci95,
fallback_layers, drop_before_pt, size_bytes, p50_ms, build_s}`` (``drop_ci95``: the paired
95 % interval of the drop in points, on the validation samples): an INT8 target whose
plain quantization missed the accuracy budget and that the fallback brought back has
status ``fallback``, the layers it kept in float and the drop before (``drop_pt`` is
after). A model without a checkpoint is named on stderr (``make zoo`` trains the missing
ones); nothing is trained here.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples" / "zoo"))
from catalog import ZOO, cache_dir  # noqa: E402

EDGESMITH = Path(sys.executable).with_name("edgesmith")
SAMPLES_ENV = "EDGESMITH_ZOO_SAMPLES"
COLUMNS = ("model", "target", "status", "top-1 fp32", "top-1", "drop pt", "drop 95% CI",
           "size", "p50 ms", "build s")


def trained(names: list[str] | None) -> tuple[list[dict[str, Any]], list[str]]:
    """The training records (JSON beside each checkpoint) of the asked zoo models, and the
    names of those without any."""
    found, missing = [], []
    for name in names or list(ZOO):
        infos = [json.loads(p.read_text()) for p in sorted(cache_dir().glob(f"{name}-*.json"))]
        infos = [i for i in infos if i.get("model") == name and Path(i["checkpoint"]).is_file()]
        found += infos
        if not infos:
            missing.append(name)
    return found, missing


def build(info: dict[str, Any], profile: str, out_root: Path,
          targets: list[str] | None = None) -> tuple[Path, float, str]:
    """Run ``edgesmith build`` on one checkpoint (only ``targets`` when given);
    (build folder, seconds, stderr tail)."""
    stem = Path(info["checkpoint"]).stem
    out = out_root / stem
    s = info["samples"]
    env = {**os.environ, SAMPLES_ENV: f"{s['train']},{s['calib']},{s['val']}"}
    cmd = [str(EDGESMITH), "build", info["checkpoint"], "--arch", info["arch"], "--data",
           info["data"], "--profile", profile, "--out", str(out),
           "--skip-unsupported"]  # a target that cannot express a node is a row, not the end
    for target in targets or []:
        cmd += ["--target", target]
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT)
    seconds = time.perf_counter() - start
    return out, seconds, "\n".join(proc.stderr.strip().splitlines()[-3:])


def _target_seconds(timings: list[dict[str, Any]], target: str) -> float | None:
    hits = [t["seconds"] for t in timings if target in str(t.get("stage", ""))]
    return round(sum(hits), 2) if hits else None


def rows_of(info: dict[str, Any], out: Path, seconds: float, err: str) -> list[dict[str, Any]]:
    """One row per target of the published manifest (one ``failed`` row if none was)."""
    manifest_path = out / "manifest.json"
    if not manifest_path.is_file():
        return [{"model": info["model"], "target": "-", "precision": "-", "status": "failed",
                 "accuracy": None, "reference_accuracy": info["val_accuracy"], "drop_pt": None,
                 "drop_ci95": None,
                 "fallback_layers": [], "drop_before_pt": None, "size_bytes": None,
                 "p50_ms": None, "build_s": round(seconds, 1), "message": err}]
    manifest = json.loads(manifest_path.read_text())
    timings = manifest.get("timings", [])
    rows = []
    for t in manifest.get("targets", []):
        fb = t.get("fallback") or {}  # the accuracy-aware INT8 fallback's record
        fallback = list(fb.get("layers") or []) if fb.get("applied") else []
        status = "fallback" if t["status"] == "ok" and fallback else t["status"]
        rows.append({
            "model": info["model"], "target": t["name"], "precision": t["precision"],
            "status": status, "accuracy": t.get("accuracy"),
            "reference_accuracy": t.get("reference_accuracy"),
            "drop_pt": t.get("accuracy_drop"), "drop_ci95": t.get("accuracy_drop_ci95"),
            "fallback_layers": fallback,
            "drop_before_pt": fb.get("drop_before_pt"),
            "size_bytes": t.get("size_bytes"), "p50_ms": t.get("latency_ms_p50"),
            "build_s": _target_seconds(timings, t["name"]),
            **({"message": t["message"].splitlines()[0][:160]} if t.get("message") else {}),
        })
    return rows


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v * 100:.1f}"


def _interval(ci: list[float] | None) -> str:
    return "-" if not ci else f"[{ci[0]:.2f}, {ci[1]:.2f}]"


def _cell(row: dict[str, Any]) -> tuple[str, ...]:
    size = row["size_bytes"]
    return (row["model"], row["target"], row["status"], _pct(row["reference_accuracy"]),
            _pct(row["accuracy"]), "-" if row["drop_pt"] is None else f"{row['drop_pt']:.2f}",
            _interval(row.get("drop_ci95")),
            "-" if size is None else f"{size / 1e6:.2f} MB",
            "-" if row["p50_ms"] is None else f"{row['p50_ms']:.3f}",
            "-" if row["build_s"] is None else f"{row['build_s']:.1f}")


def table(rows: list[dict[str, Any]]) -> str:
    """A Markdown table (pastes into the README as it is)."""
    cells = [COLUMNS] + [_cell(r) for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(COLUMNS))]
    lines = ["| " + " | ".join(c[i].ljust(widths[i]) for i in range(len(c))) + " |"
             for c in cells]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", action="append", choices=sorted(ZOO), help="this model (repeatable)")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    p.add_argument("--target", action="append", metavar="FORMAT[:PRECISION]",
                   help="only this target of the profile (repeatable; edgesmith build --target)")
    p.add_argument("--profile", default="host")
    p.add_argument("--out", type=Path, default=ROOT / "build" / "zoo", help="build folders")
    args = p.parse_args(argv)
    infos, missing = trained(args.only)
    for name in missing:
        print(f"{name}: no checkpoint in {cache_dir()} (train it: python examples/zoo/train.py "
              f"{name}, or make zoo)", file=sys.stderr)
    rows: list[dict[str, Any]] = []
    for info in infos:
        print(f"building {Path(info['checkpoint']).name} for {args.profile} ...", file=sys.stderr,
              flush=True)
        out, seconds, err = build(info, args.profile, args.out, args.target)
        got = rows_of(info, out, seconds, err)
        ok = sum(r["status"] in ("ok", "fallback") for r in got)
        print(f"  {seconds:.0f} s, {ok}/{len(got)} targets ok", file=sys.stderr, flush=True)
        rows += got
    print(json.dumps(rows, indent=2) if args.json else table(rows))
    return 0 if infos else 2


if __name__ == "__main__":
    sys.exit(main())
