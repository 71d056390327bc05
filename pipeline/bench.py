"""``edgesmith bench`` at the pipeline level: ``devices.bench.bench``, with the build's report
re-rendered after each device's results are merged into ``manifest.json``.

The re-render runs inside the bench, under the build folder's lock (``edgesmith.outdir``),
as a callback: devices imports no pipeline module, and no rebuild can publish between a
merge and the report that shows it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from edgesmith.devices import bench as device_bench
from edgesmith.devices.bench import BenchRun, Device

from .report import write_report


def bench(build_dir: Path, devices: list[Device], **options: Any) -> BenchRun:
    """Bench ``build_dir`` on ``devices`` (keywords as ``devices.bench.bench``) and keep
    ``report.md``/``report.html`` in step with the manifest."""
    return device_bench.bench(build_dir, devices, after_merge=write_report, **options)
