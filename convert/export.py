"""torch -> ONNX, the one export every other format starts from.

We use the TorchScript exporter (``dynamo=False``): it is the stable path for CNNs at
opset 17, folds BatchNorm into Conv in eval mode, and gives node names that follow the
module hierarchy, which makes the compat report readable.
"""

from __future__ import annotations

import warnings
from pathlib import Path

from edgesmith.errors import ConversionError
from edgesmith.pipeline.capture import capture_output

DEFAULT_OPSET = 17


def export_onnx(model, input_shape: tuple[int, ...], path: Path, *, opset: int = DEFAULT_OPSET,
                input_name: str = "input", output_name: str = "output") -> Path:
    """Export with a dynamic batch axis (validation runs in batches) and check the result."""
    import onnx
    import torch

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    dummy = torch.zeros(input_shape)
    model = model.eval()
    log: list[str] = []
    try:
        with warnings.catch_warnings(), capture_output(log):
            warnings.simplefilter("ignore")
            torch.onnx.export(
                model, (dummy,), str(path), dynamo=False, opset_version=opset,
                input_names=[input_name], output_names=[output_name],
                dynamic_axes={input_name: {0: "batch"}, output_name: {0: "batch"}},
                do_constant_folding=True,
            )
    except Exception as e:
        raise ConversionError(
            f"torch.onnx.export failed: {type(e).__name__}: {str(e).splitlines()[0][:300]}",
            where="export",
            fix="replace the op with ONNX-exportable ones (see the op named above), and keep "
                "forward() free of data-dependent Python control flow",
        ) from None
    try:
        onnx.checker.check_model(str(path), full_check=True)
    except onnx.checker.ValidationError as e:
        raise ConversionError(f"exported ONNX fails onnx.checker: {e}", where=str(path)) from None
    return path


def trace_torchscript(model, input_shape: tuple[int, ...], path: Path) -> Path:
    """A traced TorchScript copy: converters that start from torch (Core ML) take this file."""
    import torch

    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = torch.jit.trace(model.eval(), torch.zeros(input_shape))
    path.parent.mkdir(parents=True, exist_ok=True)
    traced.save(str(path))
    return path
