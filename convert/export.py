"""torch -> ONNX, the one export every other format starts from.

We use the TorchScript exporter (``dynamo=False``): it is the stable path for CNNs at
opset 17, folds BatchNorm into Conv in eval mode, and gives node names that follow the
module hierarchy, which makes the compat report readable.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

from edgesmith.capture import capture_output
from edgesmith.errors import ConversionError

DEFAULT_OPSET = 17


def export_onnx(model, input_shape: tuple[int, ...], path: Path, *, opset: int = DEFAULT_OPSET,
                input_name: str = "input", output_name: str = "output") -> Path:
    """Export with a dynamic batch axis (validation runs in batches) and check the result.
    Written under a temp name and renamed; the model's train/eval mode is restored."""
    import onnx
    import torch

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    was_training = model.training
    model.eval()
    log: list[str] = []
    try:
        with warnings.catch_warnings(), capture_output(log):
            warnings.simplefilter("ignore")
            torch.onnx.export(
                model, (torch.zeros(input_shape),), str(tmp), dynamo=False,
                opset_version=opset, input_names=[input_name], output_names=[output_name],
                dynamic_axes={input_name: {0: "batch"}, output_name: {0: "batch"}},
                do_constant_folding=True,
            )
        onnx.checker.check_model(str(tmp), full_check=True)
        os.replace(tmp, path)
    except onnx.checker.ValidationError as e:
        raise ConversionError(f"exported ONNX fails onnx.checker: {e}", where=str(path)) from None
    except Exception as e:
        raise ConversionError(
            f"torch.onnx.export failed: {type(e).__name__}: {str(e).splitlines()[0][:300]}",
            where="export",
            fix="replace the op with ONNX-exportable ones (see the op named above), and keep "
                "forward() free of data-dependent Python control flow",
        ) from None
    finally:
        tmp.unlink(missing_ok=True)
        model.train(was_training)
    return path


def trace_torchscript(model, input_shape: tuple[int, ...], path: Path) -> Path:
    """A traced TorchScript copy: converters that start from torch (Core ML) take this file,
    and ``pipeline.model.load`` reads it back (a pruned state dict no longer fits its class).
    """
    import io

    import torch

    from edgesmith.artifact import write_bytes_atomic

    was_training = model.training
    model.eval()
    fastpath = torch.backends.mha.get_fastpath_enabled()
    try:
        # without grad, nn.MultiheadAttention / TransformerEncoderLayer take their fused
        # fast path (torch._native_multi_head_attention), which coremltools cannot convert;
        # traced with it off they record the plain matmul/softmax ops
        torch.backends.mha.set_fastpath_enabled(False)
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            traced = torch.jit.trace(model, torch.zeros(input_shape))
        buf = io.BytesIO()
        torch.jit.save(traced, buf)
    except Exception as e:
        raise ConversionError(f"TorchScript trace failed: {type(e).__name__}: {str(e)[:300]}",
                              where=str(path)) from None
    finally:
        torch.backends.mha.set_fastpath_enabled(fastpath)
        model.train(was_training)
    write_bytes_atomic(Path(path), buf.getvalue())
    return Path(path)
