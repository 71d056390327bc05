"""benchmarks/tflite_routes.py: a failed conversion's row names what went wrong."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import tflite_routes  # noqa: E402

# what onnx2tf 2.x does: logs a missing helper executable and goes on, then fails its own
# INT8 check and re-raises that as a generic RuntimeError
CHAINED = textwrap.dedent("""
    import traceback
    try:
        raise FileNotFoundError("[Errno 2] No such file or directory: 'onnxsim'")
    except FileNotFoundError:
        traceback.print_exc()

    class StrictFullIntegerQuantizationError(Exception):
        pass

    try:
        raise StrictFullIntegerQuantizationError(
            "Unsupported op for /tmp/x/y/model_integer_quant.tflite: op_type=PADV2")
    except StrictFullIntegerQuantizationError as e:
        raise RuntimeError("flatbuffer_direct fast path failed.") from e
""")


def test_failed_conversion_reports_the_cause_not_the_rethrown_error(tmp_path):
    log = tmp_path / "route.log"
    with log.open("w") as f:
        rc = subprocess.run([sys.executable, "-c", CHAINED], stdout=f,
                            stderr=subprocess.STDOUT).returncode
    line = tflite_routes._last_error(log, rc)
    assert line.startswith("StrictFullIntegerQuantizationError: Unsupported op")
    assert "op_type=PADV2" in line and "/tmp/x/y/" not in line  # temp folders dropped


def test_a_crash_by_signal_is_named_as_one(tmp_path):
    log = tmp_path / "route.log"
    log.write_text("converting...\nValueError: an earlier warning it logged\n")
    assert tflite_routes._last_error(log, -11) == "crashed (signal 11)"
