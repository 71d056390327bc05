"""Render ``report.md`` and ``report.html`` from ``manifest.json``.

The manifest is the single source of truth; the report is a view of it, re-rendered
whenever the manifest changes (after a build, after each ``edgesmith bench``).
"""

from __future__ import annotations

import html
import json
import time
from pathlib import Path
from typing import Any

from edgesmith.artifact import write_text_atomic
from edgesmith.devices.verdict import energy_mj

from . import plots, report_detect, report_fallback, report_runtimes
from .metrics import report_lines as metric_lines
from .report_power import SWEEP_HEADER, sweep_notes, sweep_rows
from .validate import drop_verdict, resolution_warning


def _fmt(v: Any, spec: str = "") -> str:
    if v is None:
        return "—"
    if isinstance(v, float) and spec:
        return format(v, spec)
    return str(v)


def _pct(v: float | None) -> str:
    return "—" if v is None else f"{v * 100:.2f}%"


def target_rows(manifest: dict[str, Any]) -> list[list[str]]:
    """One row per target; shared by the markdown, the HTML and the CLI table. Sizes are
    compared with the FP32 artifact of the same format (the first FP32 one otherwise). A
    Cortex-M C target shows its flash (.text + .rodata + .data, what the board holds), not
    the folder of C sources that produced it, and says so."""
    targets = manifest.get("targets", [])
    fp32 = {t["format"]: t["size_bytes"] for t in targets
            if t.get("precision") == "fp32" and t.get("size_bytes")}
    any_fp32 = next(iter(fp32.values()), None)
    rows = []
    for t in targets:
        parity = t.get("parity") or {}
        flash = (t.get("meta") or {}).get("flash_bytes")
        size = flash if flash is not None else t.get("size_bytes")
        base = fp32.get(t.get("format"), any_fp32)
        ratio = f"{size / base:.2f}x" if size and base and flash is None else "—"
        not_run = t.get("status") == "ok" and t.get("ran") is False
        rows.append([
            t["name"], t.get("status", "?"), "not run" if not_run else _pct(t.get("accuracy")),
            _fmt(t.get("accuracy_drop"), ".2f"),
            _fmt(parity.get("max_abs_err"), ".1e"), _fmt(parity.get("cosine"), ".5f"),
            (f"{size / 1024:.1f}" + (" flash" if flash is not None else "")) if size else "—",
            ratio,
            _fmt(t.get("latency_ms_p50"), ".3f"),
        ])
    return rows


HEADER = ["target", "status", "top-1", "drop", "maxerr", "cosine", "KB", "xfp32", "p50 ms"]


def _md_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def _bench_rows(manifest: dict[str, Any]) -> list[list[str]]:
    rows = []
    for device, result in sorted((manifest.get("bench") or {}).items()):
        for t in result.get("targets", []) if isinstance(result, dict) else []:
            lat = t.get("latency_ms") or {}
            rows.append([device, str(t.get("name", "?")), str(t.get("status", "?")),
                         _fmt(lat.get("p50"), ".3f"), _fmt(lat.get("p99"), ".3f"),
                         _fmt(t.get("peak_rss_mb"), ".1f"), _fmt(energy_mj(t), ".4g"),
                         t.get("message", "") or ""])
    return rows


BENCH_HEADER = ["device", "target", "status", "p50 ms", "p99 ms", "peak RSS MB", "mJ/inf",
                "note"]


def _sweep_section(manifest: dict[str, Any]) -> list[str]:
    rows = sweep_rows(manifest)
    if not rows:
        return []
    return ["## Power sweep", "", _md_table(SWEEP_HEADER, rows), "",
            "Energy is per inference over the measured window (sleeps of a duty cycle or "
            "frame period included); W is the mean power over it. within budgets: the "
            "setting meets the profile's latency (p50) and energy budgets; ? = energy "
            "unavailable, so it cannot be judged.", "",
            *[f"- {n}" for n in sweep_notes(manifest)], ""]

CONFIDENCE_HEADER = ["target", "top-1", "95% CI", "drop pt", "drop 95% CI", "vs budget"]


def _interval(ci: Any, scale: float, digits: int) -> str:
    if not ci:
        return "—"
    return f"[{ci[0] * scale:.{digits}f}, {ci[1] * scale:.{digits}f}]"


def confidence_rows(manifest: dict[str, Any]) -> list[list[str]]:
    """Each validated target's top-1 (Wilson) and drop (paired) 95 % intervals, and where
    the drop's interval lies against the budget: within, over, or undecided."""
    budget = (manifest.get("budgets") or {}).get("accuracy_drop")
    rows = []
    for t in manifest.get("targets", []):
        if t.get("accuracy") is None:
            continue
        rows.append([t["name"], _pct(t["accuracy"]), _interval(t.get("accuracy_ci95"), 100, 2),
                     _fmt(t.get("accuracy_drop"), ".2f"),
                     _interval(t.get("accuracy_drop_ci95"), 1, 2),
                     drop_verdict(t.get("accuracy_drop_ci95"), budget)])
    return rows


def _confidence_lines(manifest: dict[str, Any]) -> list[str]:
    """The sentence on whether the validation split can judge the budget."""
    res = manifest.get("validation") or {}
    warning = resolution_warning(res)
    if warning:
        return [f"**The validation split is too small to judge the budget:** {warning}."]
    if res.get("resolves_budget"):
        return [f"{res['samples']} validation samples resolve the {res['budget_pt']:g} pt "
                f"budget (a drop-free artifact is shown within it at 95 %; "
                f"{res['samples_needed']} needed)."]
    return []


def skipped_rows(manifest: dict[str, Any]) -> list[list[str]]:
    """target x node for the targets --skip-unsupported left out."""
    return [[t["name"], n["node"], n["op_type"], n.get("hint") or "not supported"]
            for t in manifest.get("targets", []) if t.get("status") == "skipped"
            for n in t.get("unsupported_nodes") or []]


SKIPPED_HEADER = ["target", "node", "op", "hint"]


def timing_rows(manifest: dict[str, Any]) -> list[list[str]]:
    return [[str(t.get("stage")), f"{t.get('seconds', 0):.2f}"]
            for t in manifest.get("timings") or []]


TIMING_HEADER = ["stage", "seconds"]


def _judgement_sections(manifest: dict[str, Any]) -> list[str]:
    """Markdown: confidence, skipped targets, stage times."""
    parts: list[str] = []
    rows = confidence_rows(manifest)
    lines = _confidence_lines(manifest)
    if rows or lines:
        parts += ["## Accuracy with 95 % confidence intervals", "", *lines, ""]
        if rows:
            parts += [_md_table(CONFIDENCE_HEADER, rows), "",
                      "Top-1: Wilson score interval. Drop: paired (Tango score) interval on "
                      "the per-sample differences against the reference. vs budget: within = "
                      "the whole interval is under the budget, over = all of it above, "
                      "undecided = more samples needed.", ""]
    skipped = skipped_rows(manifest)
    if skipped:
        parts += ["## Skipped targets (--skip-unsupported)", "",
                  _md_table(SKIPPED_HEADER, skipped), "",
                  "The full node x target table is in compat.json.", ""]
    timings = timing_rows(manifest)
    if timings:
        parts += ["## Stage times", "", _md_table(TIMING_HEADER, timings), "",
                  f"Total {manifest.get('duration_s', 0):.1f} s until the manifest was "
                  "written.", ""]
    return parts


def _judgement_html(manifest: dict[str, Any]) -> list[str]:
    sections = []
    lines = _confidence_lines(manifest)
    rows = confidence_rows(manifest)
    if rows or lines:
        sections += ["<h2>Accuracy with 95 % confidence intervals</h2>",
                     *[f"<p>{html.escape(line.replace('**', ''))}</p>" for line in lines]]
        if rows:
            sections.append(_html_table(CONFIDENCE_HEADER, rows))
    if skipped_rows(manifest):
        sections += ["<h2>Skipped targets</h2>",
                     _html_table(SKIPPED_HEADER, skipped_rows(manifest))]
    if timing_rows(manifest):
        sections += ["<h2>Stage times</h2>", _html_table(TIMING_HEADER, timing_rows(manifest))]
    return sections


def _when(unix: Any) -> str:
    if not isinstance(unix, int | float):
        return "at an unknown time"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(unix))


def _bench_notes(manifest: dict[str, Any]) -> list[str]:
    """What the bench table cannot show: a device's failed last run (its earlier results
    are kept above) and results of artifacts the build no longer holds."""
    notes = []
    for device, result in sorted((manifest.get("bench") or {}).items()):
        if not isinstance(result, dict):
            continue
        err = result.get("last_error")
        if isinstance(err, dict):
            fix = f" (fix: {err['fix']})" if err.get("fix") else ""
            notes.append(f"{device}: the last run ({_when(err.get('unix'))}) failed "
                         f"({err.get('status', '?')}): {err.get('what')}{fix}; the results "
                         "shown are from earlier runs")
        for stale in result.get("stale_targets") or []:
            sha = str(stale.get("artifact_sha256") or "?")[:12]
            notes.append(f"{device}/{stale.get('name')}: results measured "
                         f"{_when(stale.get('measured_unix'))} on artifact sha256 {sha}..., "
                         "which the build no longer holds: not shown, bench again")
    return notes


def _plots(root: Path, manifest: dict[str, Any]) -> list[str]:
    made = []
    try:
        if manifest.get("targets"):
            plots.plot_targets(manifest["targets"], root / "report_targets.png")
            made.append("report_targets.png")
        if manifest.get("bench"):
            plots.plot_bench(manifest["bench"], root / "report_bench.png")
            made.append("report_bench.png")
            if plots.plot_power(manifest["bench"], root / "report_power.png") is not None:
                made.append("report_power.png")
    except Exception:  # a plot must never fail a build; the tables carry the figures
        return made
    return made


def _note(target: dict[str, Any]) -> str:
    """A target's note without its name: the build's messages start with it ("onnx-int8:
    output parity off ...") so they read alone on the console, and the report's list
    names the target already."""
    text = str(target.get("note") or target.get("message"))
    prefix = f"{target['name']}: "
    return text[len(prefix):] if text.startswith(prefix) else text


def _batch_line(manifest: dict[str, Any]) -> list[str]:
    batch = (manifest.get("stages", {}).get("export") or {}).get("batch") or {}
    if batch.get("mode", "dynamic") == "dynamic":
        return []
    return [f"- batch: {batch['mode']}: {batch.get('detail', '')}"]


def _reference_name(manifest: dict[str, Any]) -> str:
    """What the reference's accuracy is: top-1, or the metric itself when the labels are
    not classes (a detector's boxes: mAP)."""
    if manifest.get("detection") is None:
        return "top-1"
    return (manifest.get("metric") or {}).get("name", "map50")


def render_markdown(manifest: dict[str, Any], images: list[str]) -> str:
    ref = manifest.get("reference", {})
    prof = manifest.get("profile", {})
    parts = [
        f"# edgesmith build: {prof.get('name', '?')}",
        "",
        f"- model: `{manifest.get('inputs', {}).get('model')}`  data: "
        f"`{manifest.get('inputs', {}).get('data')}`",
        f"- device: {prof.get('device', {}).get('name', '?')} "
        f"({prof.get('device', {}).get('arch', '?')})",
        f"- reference ({ref.get('source')}): {_reference_name(manifest)} "
        f"{_pct(ref.get('accuracy'))} on "
        f"{manifest.get('data', {}).get('val', '?')} validation samples "
        f"(95% CI {_interval(ref.get('accuracy_ci95'), 100, 2)} %)",
        f"- input: {manifest.get('input', {}).get('shape')} "
        f"{manifest.get('input', {}).get('layout')}, "
        f"normalisation `{manifest.get('input', {}).get('normalization', {}).get('formula')}`",
        *_batch_line(manifest),
        *metric_lines(manifest),  # the primary metric (--task/--metric) and its unit
        "",
        "## Targets",
        "",
        _md_table(HEADER, target_rows(manifest)),
        "",
    ]
    notes = [f"- {t['name']}: {_note(t)}"
             for t in manifest.get("targets", []) if t.get("note") or t.get("message")]
    if notes:
        parts += ["Notes:", "", *notes, ""]
    if manifest.get("budget_misses"):
        parts += ["## Budget misses", "", *[f"- {m}" for m in manifest["budget_misses"]], ""]
    parts += _judgement_sections(manifest)
    parts += report_detect.markdown(manifest, _md_table)  # mAP per target, boxes drawn
    parts += report_fallback.markdown(manifest, _md_table)
    parts += report_runtimes.markdown(manifest, _md_table)
    if manifest.get("compress"):
        parts += ["## Compression", "", "```json",
                  json.dumps(manifest["compress"], indent=2), "```", ""]
    opt = manifest.get("stages", {}).get("optimize")
    if opt:
        parts += ["## Graph optimisation", "",
                  f"{opt['nodes_before']} -> {opt['nodes_after']} nodes; optimised vs export "
                  f"max abs err {opt['parity_max_abs_err']:.2e} (tolerance "
                  f"{opt['parity_tolerance']:.0e})", ""]
    if manifest.get("bench"):
        parts += ["## On-device benchmarks", "", _md_table(BENCH_HEADER, _bench_rows(manifest)),
                  ""]
        bench_notes = _bench_notes(manifest)
        if bench_notes:
            parts += ["Notes:", "", *[f"- {n}" for n in bench_notes], ""]
        parts += _sweep_section(manifest)
    parts += [f"![{img}]({img})" for img in images]
    return "\n".join(parts) + "\n"


def _html_table(header: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>"
                   for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def render_html(manifest: dict[str, Any], images: list[str]) -> str:
    name = html.escape(str(manifest.get("profile", {}).get("name", "?")))
    ref = manifest.get("reference", {})
    sections = [
        f"<h1>edgesmith build: {name}</h1>",
        f"<p>reference ({html.escape(str(ref.get('source')))}): top-1 "
        f"{_pct(ref.get('accuracy'))}</p>",
        *[f"<p>{html.escape(line)}</p>" for line in metric_lines(manifest)[:1]],
        "<h2>Targets</h2>", _html_table(HEADER, target_rows(manifest)),
    ]
    if manifest.get("budget_misses"):
        items = "".join(f"<li>{html.escape(m)}</li>" for m in manifest["budget_misses"])
        sections += ["<h2>Budget misses</h2>", f"<ul>{items}</ul>"]
    sections += _judgement_html(manifest)
    sections += report_detect.html_section(manifest, _html_table)
    sections += report_fallback.html_section(manifest, _html_table)
    sections += report_runtimes.html_section(manifest, _html_table)
    if manifest.get("bench"):
        sections += ["<h2>On-device benchmarks</h2>",
                     _html_table(BENCH_HEADER, _bench_rows(manifest))]
        items = "".join(f"<li>{html.escape(n)}</li>" for n in _bench_notes(manifest))
        if items:
            sections.append(f"<ul>{items}</ul>")
        if sweep_rows(manifest):
            notes = "".join(f"<li>{html.escape(n)}</li>" for n in sweep_notes(manifest))
            sections += ["<h2>Power sweep</h2>", _html_table(SWEEP_HEADER, sweep_rows(manifest)),
                         f"<ul>{notes}</ul>"]
    sections += [f'<img src="{html.escape(i)}" alt="{html.escape(i)}">' for i in images]
    style = ("body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
             "td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}"
             "td:first-child{text-align:left}img{max-width:100%}")
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>edgesmith {name}</title>"
            f"<style>{style}</style></head><body>{''.join(sections)}</body></html>\n")


def write_report(root: Path) -> None:
    root = Path(root)
    manifest = json.loads((root / "manifest.json").read_text())
    images = _plots(root, manifest)
    write_text_atomic(root / "report.md", render_markdown(manifest, images))
    write_text_atomic(root / "report.html", render_html(manifest, images))
