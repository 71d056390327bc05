"""What a failed onnx2tf run is reported as: the line that says why, not the first line
that happens to contain "error". The logs are the shapes onnx2tf 1.28 and TensorFlow
write (ANSI colours included), as seen in runs that failed here."""

from __future__ import annotations

from edgesmith.convert._onnx2tf import last_error

ONEDNN = ("I0000 00:00:1764790000.1 cpu_feature_guard.cc:227] oneDNN custom operations are "
          "on. You may see slightly different numerical results due to floating-point "
          "round-off errors from different computation orders.")


def test_onnx2tf_diagnosis_is_quoted_not_tensorflows_start_up_notice(tmp_path):
    log = tmp_path / "onnx2tf.log"
    log.write_text("\n".join([
        ONEDNN,
        "\x1b[31mERROR:\x1b[0m The trace log is below.",
        "\x1b[31mERROR:\x1b[0m The current implementation of GridSample supports only "
        "mode=['bilinear']. mode: linear",
        "Traceback (most recent call last):",
        '  File "onnx2tf/ops/GridSample.py", line 90, in make_node',
        "NotImplementedError",
        ONEDNN,
    ]))
    assert last_error(log) == ("The current implementation of GridSample supports only "
                               "mode=['bilinear']. mode: linear")


def test_without_a_diagnosis_the_last_exception_raised_is_quoted(tmp_path):
    log = tmp_path / "onnx2tf.log"
    log.write_text("\n".join([
        ONEDNN,
        "Traceback (most recent call last):",
        '  File "tensorflow/lite/python/convert.py", line 1, in convert',
        "ValueError: Cannot set tensor: Dimension mismatch. Got 3 but expected 1",
        "(onnx2tf exits 1)",
    ]))
    assert last_error(log) == ("ValueError: Cannot set tensor: Dimension mismatch. "
                               "Got 3 but expected 1")
