"""The report shows what a bench records beside its results: a device's failed last run
(``last_error``, the results shown being earlier ones) and results of artifacts the build no
longer holds (``stale_targets``). Rendered by the real report code from a manifest shaped as
``edgesmith bench`` writes it (devices/merge.py)."""

from __future__ import annotations

import json

from edgesmith.devices.merge import device_record, drop_stale
from edgesmith.pipeline.report import render_html, render_markdown, write_report

GOOD = {"device": "pi", "status": "ok", "error": None, "started_unix": 1_700_000_000,
        "targets": [{"name": "onnx-fp32", "status": "ok", "latency_ms": {"p50": 1.5, "p99": 2.0},
                     "peak_rss_mb": 40.0, "artifact_sha256": "a" * 64,
                     "measured_unix": 1_700_000_000},
                    {"name": "tflite-fp32", "status": "ok", "latency_ms": {"p50": 1.0},
                     "artifact_sha256": "b" * 64, "measured_unix": 1_700_000_000}]}
FAILED = {"device": "pi", "status": "error", "targets": [],
          "error": {"what": "cannot connect after 3 attempts: Connection refused",
                    "where": "pi.local:22", "fix": "check that the device is up",
                    "type": "DeviceError"}}


def _manifest() -> dict:
    """The build now holds another onnx-fp32 (sha256 c...), and the last run failed."""
    record = drop_stale(device_record(GOOD, FAILED),
                        {"onnx-fp32": "c" * 64, "tflite-fp32": "b" * 64})
    return {"profile": {"name": "p"}, "targets": [], "bench": {"pi": record}}


def test_the_report_says_a_devices_last_run_failed_and_what_it_shows_instead():
    manifest = _manifest()
    assert manifest["bench"]["pi"]["last_error"]["status"] == "error"
    md = render_markdown(manifest, [])
    line = next(n for n in md.splitlines() if n.startswith("- pi: the last run"))
    assert "failed (error): cannot connect after 3 attempts" in line
    assert "fix: check that the device is up" in line and "earlier runs" in line
    assert "| pi | tflite-fp32 | ok | 1.000 |" in md  # the kept result is still in the table
    assert "cannot connect after 3 attempts" in render_html(manifest, [])


def test_the_report_names_results_of_an_artifact_the_build_no_longer_holds():
    manifest = _manifest()
    md = render_markdown(manifest, [])
    assert "| pi | onnx-fp32 |" not in md
    line = next(n for n in md.splitlines() if n.startswith("- pi/onnx-fp32:"))
    assert "sha256 aaaaaaaaaaaa..." in line and "no longer holds" in line
    assert "2023-11-14 22:13:20 UTC" in line
    assert "pi/onnx-fp32: results measured" in render_html(manifest, [])


def test_write_report_renders_the_bench_notes_from_manifest_json(tmp_path):
    (tmp_path / "manifest.json").write_text(json.dumps(_manifest()))
    write_report(tmp_path)
    assert "the last run" in (tmp_path / "report.md").read_text()
    assert "no longer holds" in (tmp_path / "report.html").read_text()
