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


def test_onnx2tf_own_diagnosis_is_quoted_before_its_traceback(tmp_path):
    log = tmp_path / "converter.log"
    log.write_text("I0000 port.cc:153] oneDNN custom operations are on. You may see slightly "
                   "different numerical results due to floating-point round-off errors\n"
                   "\x1b[31mERROR:\x1b[0m The current implementation of GridSample supports "
                   "only mode=['bilinear'].\n\x1b[31mERROR:\x1b[0m The trace log is below.\n"
                   "Traceback (most recent call last):\nKeyError: 'linear'\n")
    assert tflite_routes._last_error(log, 1) == \
        "The current implementation of GridSample supports only mode=['bilinear']."


def test_a_failed_step_onnx2tf_went_past_is_named_with_its_exception(tmp_path):
    log = tmp_path / "route.log"
    log.write_text("RuntimeError: Select TensorFlow op(s) are not supported\n"
                   "WARNING: Full INT8 Quantization tflite output failed.\n"
                   "FileNotFoundError: [Errno 2] No such file: 'model_integer_quant.tflite'\n")
    assert tflite_routes._last_error(log, 1) == (
        "Full INT8 Quantization tflite output failed. RuntimeError: Select TensorFlow op(s) "
        "are not supported")


def test_measuring_an_unprepared_folder_is_a_usage_error_naming_prepare(tmp_path):
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "tflite_routes.py"), "measure",
                        "--out", str(tmp_path), "--models", "kws_gru"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "none of kws_gru is prepared" in r.stderr and "prepare --out" in r.stderr
    assert r.stdout == ""  # no empty result that reads like a measurement
