"""The report's KB column: a Cortex-M C target shows the flash it takes on the board
(``meta.flash_bytes``, from ``size`` of the cross-compiled objects), never the size of its
folder of C sources, which is several times larger; host targets show their artifact."""

from __future__ import annotations

from edgesmith.pipeline.report import HEADER, render_markdown, target_rows


def _manifest() -> dict:
    return {"profile": {"name": "cortex-m7"}, "targets": [
        {"name": "c-fp32", "format": "c", "precision": "fp32", "status": "ok",
         "size_bytes": 400 * 1024},
        {"name": "c-int8", "format": "c", "precision": "int8", "status": "ok",
         "size_bytes": 9_000 * 1024, "meta": {"flash_bytes": 88_757, "ram_bytes": 10_924}},
    ]}


def test_an_mcu_target_shows_its_flash_not_its_source_folder():
    rows = {r[0]: dict(zip(HEADER, r, strict=True)) for r in target_rows(_manifest())}
    assert rows["c-int8"]["KB"] == "86.7 flash"
    assert rows["c-int8"]["xfp32"] == "—"  # flash against a folder size would mean nothing
    assert rows["c-fp32"]["KB"] == "400.0"
    assert "86.7 flash" in render_markdown(_manifest(), [])
