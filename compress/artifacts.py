"""What the compress stage writes: ONNX exports, TorchScript traces, serialized sizes.

Kept apart from the pruning and QAT logic so both (and the stage) measure sizes the
same way: the state dict as ``torch.save`` writes it, and the ONNX file as exported.
"""

from __future__ import annotations

import io
import os
import tempfile
import warnings
from pathlib import Path

import torch
from torch import nn

from edgesmith.errors import ConversionError
from edgesmith.pipeline.artifact import write_bytes_atomic

OPSET = 17


def state_dict_bytes(model: nn.Module) -> int:
    """Size of ``torch.save(model.state_dict())``: what a checkpoint of the model costs."""
    buf = io.BytesIO()
    torch.save(model.state_dict(), buf)
    return buf.getbuffer().nbytes


def export_onnx(model: nn.Module, example: torch.Tensor, path: Path, *,
                opset: int = OPSET) -> Path:
    """FP32 ONNX with a dynamic batch axis (TorchScript exporter, ``dynamo=False``)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    was_training = model.training
    model.eval()
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                model, (example,), tmp, dynamo=False, opset_version=opset,
                input_names=["input"], output_names=["output"],
                dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}},
            )
        os.replace(tmp, path)
    except Exception as e:
        Path(tmp).unlink(missing_ok=True)
        raise ConversionError(f"ONNX export failed: {type(e).__name__}: {str(e)[:300]}",
                              where=str(path)) from None
    finally:
        model.train(was_training)
    return path


def onnx_bytes(model: nn.Module, example: torch.Tensor) -> int:
    """Size of the model's FP32 ONNX export (written to a temp dir, then removed)."""
    with tempfile.TemporaryDirectory() as d:
        return export_onnx(model, example, Path(d) / "m.onnx").stat().st_size


def save_torchscript(model: nn.Module, example: torch.Tensor, path: Path) -> Path:
    """A traced TorchScript ``model.pt`` that ``pipeline.model.load`` reads back."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            traced = torch.jit.trace(model, example)
        buf = io.BytesIO()
        torch.jit.save(traced, buf)
    except Exception as e:
        raise ConversionError(f"TorchScript trace failed: {type(e).__name__}: {str(e)[:300]}",
                              where=str(path)) from None
    finally:
        model.train(was_training)
    write_bytes_atomic(Path(path), buf.getvalue())
    return Path(path)


def save_state_dict(model: nn.Module, path: Path) -> Path:
    buf = io.BytesIO()
    torch.save(model.state_dict(), buf)
    write_bytes_atomic(Path(path), buf.getvalue())
    return Path(path)
