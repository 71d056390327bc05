"""Load the user's model from any of the references the CLI accepts.

``.pt`` files go through ``torch.load(weights_only=True)`` unless the user passes
``--trust-pickle``: a checkpoint from the internet is code, and we do not run code
the user did not ask us to.
"""

from __future__ import annotations

import pickle
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgesmith.errors import ModelLoadError

from .refs import import_callable, is_callable_ref


@dataclass
class LoadedModel:
    """Either a torch module (compressible) or an ONNX file (conversion only)."""

    ref: str
    torch_model: Any | None = None  # torch.nn.Module, in eval mode
    onnx_path: Path | None = None
    kind: str = "torch"  # torch | torchscript | onnx


def _build(ref: str) -> Any:
    import torch

    fn = import_callable(ref, ModelLoadError)
    try:
        model = fn()
    except Exception as e:
        raise ModelLoadError(f"calling {ref} raised {type(e).__name__}: {e}", where=ref) from None
    if not isinstance(model, torch.nn.Module):
        raise ModelLoadError(f"{ref} returned {type(model).__name__}, expected a torch.nn.Module",
                             where=ref)
    return model


def _is_torchscript(path: Path) -> bool:
    try:
        with zipfile.ZipFile(path) as z:
            return any(n.endswith("constants.pkl") or "/code/" in n for n in z.namelist())
    except zipfile.BadZipFile:
        return False


def _load_pt(path: Path, arch: str | None, trust_pickle: bool) -> LoadedModel:
    import torch

    where = str(path)
    if _is_torchscript(path):
        try:
            model = torch.jit.load(str(path), map_location="cpu")
        except Exception as e:
            raise ModelLoadError(f"cannot load TorchScript: {e}", where=where) from None
        return LoadedModel(ref=where, torch_model=model.eval(), kind="torchscript")
    try:
        obj = torch.load(path, map_location="cpu", weights_only=not trust_pickle)
    except pickle.UnpicklingError as e:
        raise ModelLoadError(
            "refused to unpickle: the file holds Python objects beyond tensors "
            f"({str(e).splitlines()[0][:200]})",
            where=where,
            fix="save a state dict (torch.save(model.state_dict(), path)) and pass --arch; "
                "or, only if you trust the file's author, pass --trust-pickle",
        ) from None
    except (RuntimeError, EOFError, OSError, zipfile.BadZipFile) as e:
        raise ModelLoadError(f"not a readable torch checkpoint: {e}", where=where) from None
    if isinstance(obj, torch.nn.Module):
        return LoadedModel(ref=where, torch_model=obj.eval(), kind="torch")
    if isinstance(obj, dict) and "state_dict" in obj and isinstance(obj["state_dict"], dict):
        obj = obj["state_dict"]
    if not isinstance(obj, dict):
        raise ModelLoadError(f"checkpoint holds a {type(obj).__name__}, not a state dict",
                             where=where)
    if arch is None:
        raise ModelLoadError(
            "this .pt is a state dict: edgesmith needs the architecture to put it in",
            where=where, fix="pass --arch path/to/model.py:build (a callable returning the module)",
        )
    model = _build(arch)
    try:
        model.load_state_dict(obj, strict=True)
    except RuntimeError as e:
        first = str(e).split("\n\t")[:3]
        raise ModelLoadError(
            f"state dict does not fit {arch}: {' '.join(first)[:400]}", where=where,
            fix="check that --arch builds the same architecture the checkpoint was trained with",
        ) from None
    return LoadedModel(ref=where, torch_model=model.eval(), kind="torch")


def load(ref: str, *, arch: str | None = None, trust_pickle: bool = False) -> LoadedModel:
    """A ``file.py:callable``, ``module:callable``, ``.pt`` checkpoint or ``.onnx`` file."""
    path = Path(ref)
    if path.suffix in (".pt", ".pth", ".onnx"):
        if not path.exists():
            raise ModelLoadError(f"model file {ref} does not exist",
                                 fix="check the path (relative paths start at the current dir)")
        if path.is_dir():
            raise ModelLoadError(f"{ref} is a directory, expected a model file")
        if path.suffix == ".onnx":
            return LoadedModel(ref=ref, onnx_path=path, kind="onnx")
        return _load_pt(path, arch, trust_pickle)
    if is_callable_ref(ref):
        return LoadedModel(ref=ref, torch_model=_build(ref).eval(), kind="torch")
    if not path.exists():
        raise ModelLoadError(
            f"model {ref!r} does not exist",
            fix="pass a .pt/.onnx file, path/to/model.py:callable or package.module:callable",
        )
    raise ModelLoadError(
        f"cannot tell what model {ref!r} is",
        fix="pass a .pt/.onnx file, path/to/model.py:callable or package.module:callable",
    )


def check_forward(model: Any, shape: tuple[int, ...], where: str) -> tuple[int, ...]:
    """Run one batch of zeros at the recorded input shape; return the output shape."""
    import torch

    try:
        with torch.no_grad():
            out = model(torch.zeros(shape))
    except Exception as e:
        msg = str(e).strip().splitlines()[0][:300] if str(e).strip() else type(e).__name__
        raise ModelLoadError(
            f"forward pass on an input of shape {list(shape)} failed: {msg}", where=where,
            fix="check that the model takes the data set's input shape (see the manifest's input)",
        ) from None
    if not isinstance(out, torch.Tensor):
        raise ModelLoadError(f"forward returned {type(out).__name__}; expected one tensor",
                             where=where, fix="return the logits tensor from forward()")
    return tuple(out.shape)
