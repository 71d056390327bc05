"""What the compress stage writes: ONNX exports, TorchScript traces, serialized sizes.

Kept apart from the pruning and QAT logic so both (and the stage) measure sizes the
same way: the state dict as ``torch.save`` writes it, and the ONNX file as exported.
"""

from __future__ import annotations

import io
import tempfile
from pathlib import Path

import torch
from torch import nn

from edgesmith.artifact import write_bytes_atomic
from edgesmith.convert import export

OPSET = export.DEFAULT_OPSET


def state_dict_bytes(model: nn.Module) -> int:
    """Size of ``torch.save(model.state_dict())``: what a checkpoint of the model costs."""
    buf = io.BytesIO()
    torch.save(model.state_dict(), buf)
    return buf.getbuffer().nbytes


def export_onnx(model: nn.Module, example: torch.Tensor, path: Path, *,
                opset: int | None = None) -> Path:
    """FP32 ONNX with a dynamic batch axis: the same export ``edgesmith build`` uses
    (``opset`` None: opset 17, or the newer one an op needs)."""
    return export.export_onnx(model, tuple(example.shape), path, opset=opset)


def onnx_bytes(model: nn.Module, example: torch.Tensor) -> int:
    """Size of the model's FP32 ONNX export (written to a temp dir, then removed)."""
    with tempfile.TemporaryDirectory() as d:
        return export_onnx(model, example, Path(d) / "m.onnx").stat().st_size


def save_torchscript(model: nn.Module, example: torch.Tensor, path: Path) -> Path:
    """A traced TorchScript ``model.pt`` that ``pipeline.model.load`` reads back."""
    return export.trace_torchscript(model, tuple(example.shape), path)


def save_state_dict(model: nn.Module, path: Path) -> Path:
    buf = io.BytesIO()
    torch.save(model.state_dict(), buf)
    write_bytes_atomic(Path(path), buf.getvalue())
    return Path(path)
