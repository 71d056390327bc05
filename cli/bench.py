"""``edgesmith bench``: parse, call ``edgesmith.pipeline.bench`` (the devices bench plus the
report re-rendered), render with rich."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
from rich import box
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from edgesmith.devices.bench import DEFAULT_RUNS, DEFAULT_WARMUP, BenchEvents, BenchRun
from edgesmith.devices.fleet import resolve_devices
from edgesmith.pipeline.bench import bench

from .app import app, err_console, out_console
from .render import print_whole


class _RichBenchEvents(BenchEvents):
    """One progress bar per device: connect, upload, one step per target, cleanup."""

    def __init__(self, progress: Progress):
        self.progress = progress
        self.tasks: dict[str, Any] = {}

    def device_start(self, device: str, steps: int) -> None:
        self.tasks[device] = self.progress.add_task(f"{device}: connecting", total=steps)

    def device_step(self, device: str, what: str) -> None:
        self.progress.update(self.tasks[device], advance=1, description=f"{device}: {what}")

    def warn(self, message: str) -> None:
        self.progress.console.print(f"[yellow]{message}[/]", highlight=False)

    def device_done(self, device: str, result: dict[str, Any]) -> None:
        status = result["status"]
        colour = {"ok": "green", "partial": "yellow"}.get(status, "red")
        self.progress.update(self.tasks[device], description=f"{device}: [{colour}]{status}[/]",
                             completed=self.progress.tasks[self.tasks[device]].total)


def _fmt(v: Any, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def results_table(run: BenchRun) -> Table:
    table = Table(title="on-device bench", box=box.SIMPLE_HEAD, pad_edge=False,
                  padding=(0, 1, 0, 0))
    rows = run.rows()
    # frames: top-1 on raw camera frames the device preprocessed (image-folder builds)
    frames = any(r["accuracy"] for r in rows)
    for i, h in enumerate(["device", "target", "status", "p50 ms", "p99 ms", "inf/s",
                           "RSS MB", "mJ/inf", "max err", "agree top-1"]
                          + (["frames top-1"] if frames else []) + ["budget"]):
        table.add_column(h, justify="left" if i < 3 else "right", no_wrap=i < 3)
    misses = {(m["device"], m["target"]) for m in run.budget_misses() + run.energy_misses()}
    for r in rows:
        par, acc = r["parity"] or {}, r["accuracy"] or {}
        style = "red" if r["status"] == "error" or (r["device"], r["target"]) in misses else (
            "yellow" if r["status"] != "ok" else "")
        table.add_row(r["device"], str(r["target"]), str(r["status"]), _fmt(r["p50"], ".3f"),
                      _fmt(r["p99"], ".3f"), _fmt(r["throughput"], ".0f"),
                      _fmt(r["rss_mb"], ".1f"), _fmt(r["energy_mj"], ".4g"),
                      _fmt(par.get("max_abs_err"), ".1e"),
                      _fmt(par.get("top1_agreement"), ".0%"),
                      *([_fmt(acc.get("top1"), ".2%")] if frames else []),
                      _fmt(r["budget_ms"], "g"), style=style)
    return table


def sweep_table(run: BenchRun) -> Table | None:
    """One row per power-sweep setting measured (None when no target was swept)."""
    table = Table(title="power sweep", box=box.SIMPLE_HEAD, pad_edge=False,
                  padding=(0, 1, 0, 0))
    for i, h in enumerate(["device", "target", "setting", "status", "p50 ms", "p99 ms",
                           "inf/s", "mJ/inf", "W"]):
        table.add_column(h, justify="left" if i < 4 else "right", no_wrap=i < 4)
    for name, d in run.devices.items():
        for t in d.get("targets", []):
            for s in (t.get("power_sweep") or {}).get("settings") or []:
                lat = s.get("latency_ms") or {}
                table.add_row(name, str(t.get("name")), str(s.get("label")),
                              str(s.get("status")), _fmt(lat.get("p50"), ".3f"),
                              _fmt(lat.get("p99"), ".3f"), _fmt(s.get("throughput_ips"), ".0f"),
                              _fmt(s.get("energy_mj"), ".4g"), _fmt(s.get("power_w"), ".3g"))
    return table if table.row_count else None


def _sweep_notes(name: str, t: dict[str, Any]) -> list[str]:
    """Where a swept target's energy came from (or why there is none) and what failed."""
    sweep = t.get("power_sweep")
    if not isinstance(sweep, dict):
        return []
    where = f"{name}/{t.get('name')}"
    notes = [f"{where}: energy: {sweep.get('energy_source')}"]
    cpufreq = sweep.get("cpufreq") or {}
    if cpufreq.get("why"):
        notes.append(f"{where}: cpufreq: {cpufreq['why']}")
    if sweep.get("message"):
        notes.append(f"{where}: power sweep: {sweep['message']}")
    notes += [f"{where} [{s.get('label')}]: {s['message']}"
              for s in sweep.get("settings") or [] if s.get("message")]
    return notes


def _notes(run: BenchRun) -> list[str]:
    notes = [f"{r['device']}/{r['target']}: {r['message']}" for r in run.rows() if r["message"]]
    for name, d in run.devices.items():
        for t in d.get("targets", []):
            notes += _sweep_notes(name, t)
            pre = t.get("prebuilt")
            if isinstance(pre, dict):
                wrap = t.get("exec_wrapper")
                notes.append(f"{name}/{t.get('name')}: binary built here with {pre.get('cc')} "
                             f"{pre.get('cflags') or ''}".rstrip()
                             + (f", run under {' '.join(wrap)} (emulated timings)"
                                if wrap else ""))
        if d.get("error"):
            notes.append(f"{name}: {d['status']}: {d['error'].get('what')}")
        if d.get("kept") and d.get("workdir"):
            notes.append(f"{name}: work dir kept at {d['workdir']}")
    return notes


@app.command("bench")
def bench_command(
    build_dir: Path = typer.Argument(..., help="a folder written by `edgesmith build`"),
    device: str = typer.Option(None, "--device", help="device profile (bundled name or "
                               "YAML path) whose ssh: block, budgets and cores apply"),
    host: str = typer.Option(None, "--host", help="host name, address or ~/.ssh/config alias"),
    port: int = typer.Option(None, "--port", help="SSH port (default: ssh config, then 22)"),
    user: str = typer.Option(None, "--user", help="SSH user (default: ssh config)"),
    identity: str = typer.Option(None, "--identity", help="private key file (default: agent "
                                 "and ~/.ssh keys)"),
    known_hosts: str = typer.Option(None, "--known-hosts", help="known_hosts file (default "
                                    "~/.ssh/known_hosts; unknown host keys are refused)"),
    python: str = typer.Option(None, "--python", help="python on the device (default python3)"),
    local: bool = typer.Option(False, "--local", help="run here, without SSH"),
    runs: int = typer.Option(DEFAULT_RUNS, "--runs", help="timed runs per target"),
    warmup: int = typer.Option(DEFAULT_WARMUP, "--warmup", help="untimed runs first"),
    fleet: Path = typer.Option(None, "--fleet", help="devices.yaml: several devices at once"),
    concurrency: int = typer.Option(None, "--concurrency",
                                    help="devices benched at once (default: the fleet "
                                         "file's, else 4)"),
    keep: bool = typer.Option(False, "--keep", help="keep the work dir on the device"),
    prebuilt_c: bool = typer.Option(None, "--prebuilt-c/--no-prebuilt-c",
                                    help="C targets: upload edgesmith_bench built here with "
                                         "the profile's cross_cc (else cc) instead of the "
                                         "sources; default: when the profile or manifest "
                                         "names a cross_cc"),
    exec_wrapper: str = typer.Option(None, "--exec-wrapper",
                                     help="run the C binary on the device under this command,"
                                          " e.g. \"qemu-aarch64 -L /usr/aarch64-linux-gnu\""),
    power_sweep: bool = typer.Option(False, "--power-sweep",
                                     help="measure again under each cpufreq governor, a few "
                                          "frequencies and the profile's duty cycle, with "
                                          "energy per inference where a sensor exists; "
                                          "cpufreq is put back afterwards"),
    sysfs_root: str = typer.Option(None, "--sysfs-root",
                                   help="the device's sysfs tree for --power-sweep "
                                        "(default /sys)"),
    as_json: bool = typer.Option(False, "--json", help="print the results as JSON"),
) -> None:
    """Run a build's targets on a device (or a fleet, or here) and merge the figures into
    its manifest and report. Exit 3 when a target misses budgets.latency_ms (p50) or
    budgets.energy_mj, 5 when a device fails; measured results are kept either way."""
    devices, file_concurrency = resolve_devices(
        local=local, device=device, host=host, port=port, user=user, identity=identity,
        python=python, known_hosts=known_hosts, fleet=fleet)
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                  TimeElapsedColumn(), console=err_console, transient=as_json) as progress:
        run = bench(build_dir, devices, runs=runs, warmup=warmup, keep=keep,
                    concurrency=concurrency or file_concurrency,
                    events=_RichBenchEvents(progress), prebuilt_c=prebuilt_c,
                    exec_wrapper=exec_wrapper, power_sweep=power_sweep,
                    sysfs_root=sysfs_root)
    if as_json:
        out_console.print_json(json.dumps(run.to_json(), default=str))
    else:
        print_whole(out_console, results_table(run))
        sweep = sweep_table(run)
        if sweep is not None:
            print_whole(out_console, sweep)
        for note in _notes(run):
            out_console.print(note, markup=False, soft_wrap=True)
        out_console.print(f"results: {Path(build_dir) / 'bench'}   report: "
                          f"{Path(build_dir) / 'report.md'}")
    run.raise_for_status()
