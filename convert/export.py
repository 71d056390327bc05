"""torch -> ONNX, the one export every other format starts from.

We use the TorchScript exporter (``dynamo=False``): it is the stable path for CNNs at
opset 17, folds BatchNorm into Conv in eval mode, and gives node names that follow the
module hierarchy, which makes the compat report readable.
"""

from __future__ import annotations

import os
import re
import warnings
from pathlib import Path

from edgesmith.artifact import write_bytes_atomic
from edgesmith.capture import capture_output
from edgesmith.errors import ConversionError, UsageError

DEFAULT_OPSET = 17
MIN_OPSET = 17  # what the compat rules and the C lowering were established at
# the torch exporter names the opset an op needs: "Support for this operator was added in
# version 20, try exporting with this version"
_NEEDS_OPSET = re.compile(r"added in version (\d+)")


def max_opset() -> int:
    """The newest opset the TorchScript exporter writes (20 in torch 2.13)."""
    from torch.onnx import _constants

    return int(getattr(_constants, "ONNX_TORCHSCRIPT_EXPORTER_MAX_OPSET", 20))


def check_opset(opset: int | None, onnx_model: str | None = None) -> int | None:
    """A ``--opset`` the exporter can write, checked before any work (None: automatic).
    ``onnx_model``: the model is that ONNX file, which is not exported, so an opset for
    it is refused rather than ignored."""
    if opset is None:
        return None
    if not MIN_OPSET <= opset <= max_opset():
        raise UsageError(f"--opset {opset} is outside {MIN_OPSET}..{max_opset()}",
                         where="--opset", fix=f"pass an opset from {MIN_OPSET} to {max_opset()}, "
                                              "or leave --opset out to let the export choose")
    if onnx_model is not None:
        raise UsageError(f"--opset {opset} applies to the torch export; {onnx_model} is ONNX "
                         "already and keeps its own opset", where="--opset",
                         fix="leave --opset out, or convert the file's opset yourself "
                             "(onnx.version_converter)")
    return opset


def exported_opset(path: Path) -> int:
    """The default-domain opset an ONNX file was written at (what the manifest records)."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)


def export_onnx(model, input_shape: tuple[int, ...], path: Path, *, opset: int | None = None,
                input_name: str = "input", output_name: str = "output") -> Path:
    """Export with a dynamic batch axis (validation runs in batches) and check the result.
    Written under a temp name and renamed; the model's train/eval mode is restored.

    ``opset`` None: DEFAULT_OPSET, and when the exporter answers that an op needs a newer
    opset (``affine_grid`` needs 20), again at the one it names. A given ``opset`` is the
    user's choice (their runtime may stop there): kept, and the error names the opset the
    op needs."""
    current = DEFAULT_OPSET if opset is None else opset
    while True:
        try:
            return _export_at(model, input_shape, Path(path), current, input_name, output_name)
        except _NeedsOpset as e:
            if opset is None and current < e.needed <= max_opset():
                current = e.needed
                continue
            raise ConversionError(
                f"torch.onnx.export failed at opset {current}: {e.message}", where="export",
                fix=f"export at opset {e.needed} (--opset {e.needed})" if e.needed <= max_opset()
                else f"opset {e.needed} is newer than this torch exports ({max_opset()}): "
                     "replace the op with ONNX-exportable ones") from None


class _NeedsOpset(Exception):
    """The exporter refused an op at this opset and named the one that has it."""

    def __init__(self, needed: int, message: str):
        super().__init__(message)
        self.needed, self.message = needed, message


def _export_at(model, input_shape: tuple[int, ...], path: Path, opset: int, input_name: str,
               output_name: str) -> Path:
    import onnx
    import torch

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
        first = str(e).splitlines()[0][:300] if str(e).strip() else ""
        needed = _NEEDS_OPSET.search(str(e))
        if needed:
            raise _NeedsOpset(int(needed.group(1)), first) from None
        raise ConversionError(
            f"torch.onnx.export failed: {type(e).__name__}: {first}",
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
            # check_trace re-traced and re-ran the model on the same input and compared
            # (its output warnings are ignored here): 11.7 of 49 s CPU (cProfile) of a
            # MobileNetV2-96 build
            traced = torch.jit.trace(model, torch.zeros(input_shape), check_trace=False)
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
