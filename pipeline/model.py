"""Load the user's model from any of the references the CLI accepts.

``.pt`` files go through ``torch.load(weights_only=True)`` unless the user passes
``--trust-pickle``: a checkpoint from the internet is code, and we do not run code
the user did not ask us to.
"""

from __future__ import annotations

import dataclasses
import pickle
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edgesmith.convert.optimize import ort_session
from edgesmith.errors import DataError, ModelLoadError

from .packing import Packing, pack_onnx, pack_torch, torch_outputs
from .refs import import_callable, is_callable_ref


@dataclass(frozen=True)
class BatchMode:
    """How the pipeline feeds the model batches. Most published ONNX files fix the batch
    axis to 1; the pipeline validates in batches, so such a graph is either given a
    symbolic batch axis (when a run at batch 2 proves the graph allows it) or fed one
    sample per run everywhere (reference, graph check, calibration, validation)."""

    mode: str = "dynamic"  # dynamic | made-dynamic | per-sample
    detail: str = ""

    @property
    def max_batch(self) -> int | None:
        """The largest batch the model takes; None when any batch runs."""
        return 1 if self.mode == "per-sample" else None

    def to_json(self) -> dict[str, str]:
        return {"mode": self.mode, "detail": self.detail}


@dataclass
class LoadedModel:
    """Either a torch module (compressible) or an ONNX file (conversion only)."""

    ref: str
    torch_model: Any | None = None  # torch.nn.Module, in eval mode
    onnx_path: Path | None = None
    kind: str = "torch"  # torch | torchscript | onnx
    batch: BatchMode = BatchMode()
    # the graph with its batch axis made symbolic (``batch.mode == "made-dynamic"``): kept
    # in memory until the build has a folder to write it to
    onnx_bytes: bytes | None = None
    # several outputs packed into one (packing.py): how, for the manifest; None for one
    packing: Packing | None = None

    @property
    def onnx_source(self) -> Path | bytes | None:
        """What onnxruntime runs as this model: the rewritten graph, else the file."""
        return self.onnx_bytes if self.onnx_bytes is not None else self.onnx_path


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


def check_forward(model: Any, shape: tuple[int, ...], where: str,
                  data: str | None = None) -> tuple[int, ...]:
    """Run one batch of zeros at the data's input shape; return the output shape.

    With ``data`` (the data set's reference), a failing forward is reported against the
    data file: a model that ran in training but rejects these samples most often means
    the file's ``x`` is shaped differently (a missing channel axis, NHWC for NCHW).
    """
    import torch

    try:
        with torch.no_grad():
            out = model(torch.zeros(shape))
    except Exception as e:
        msg = str(e).strip().splitlines()[0][:300] if str(e).strip() else type(e).__name__
        if data is not None:
            raise _data_does_not_fit(data, shape, where, msg) from None
        raise ModelLoadError(
            f"forward pass on an input of shape {list(shape)} failed: {msg}", where=where,
            fix="check that the model takes this input shape; pass --data with samples "
                "of the shape the model was trained on",
        ) from None
    outs = torch_outputs(out, where)  # several tensors: packed into one by pack_outputs
    return tuple(out.shape) if outs is None else tuple(outs[0].shape)


def _data_does_not_fit(data: str, shape: tuple[int, ...], model: str, why: str) -> DataError:
    return DataError(
        f"the forward pass of the model {model} fails on this data's samples of shape "
        f"{list(shape[1:])} (a batch: {list(shape)}): {why}",
        where=data,
        fix="store x as (N, *sample shape the model takes), e.g. (N, C, H, W) for a 2-D CNN; "
            "or check that the model and --data belong together",
    )


def onnx_input_shape(path: Path) -> tuple[str, list[int | str] | None]:
    """The first real graph input's name and dims (an int, or the symbolic name / '?');
    None for the dims when the graph does not state the input's rank."""
    import onnx

    try:
        graph = onnx.load(str(path), load_external_data=False).graph
    except Exception as e:
        raise ModelLoadError(f"not a readable ONNX file: {str(e).splitlines()[0][:200]}",
                             where=str(path)) from None
    weights = {t.name for t in graph.initializer}
    inputs = [i for i in graph.input if i.name not in weights]
    if not inputs:
        raise ModelLoadError("the ONNX graph has no input", where=str(path))
    tensor = inputs[0].type.tensor_type
    if not tensor.HasField("shape"):
        return inputs[0].name, None
    return inputs[0].name, [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?")
                            for d in tensor.shape.dim]


def check_input(loaded: LoadedModel, shape: tuple[int, ...], data: str) -> None:
    """Does the model take a batch of the data's samples? If not, say so against the data
    file (``data``), with the model's own complaint beside its shape."""
    if loaded.torch_model is not None:
        check_forward(loaded.torch_model, shape, loaded.ref, data=data)
        return
    name, dims = onnx_input_shape(loaded.onnx_path)
    if dims is None:
        return  # rank not stated: onnxruntime will tell when it runs the data
    fits = len(dims) == len(shape) and all(
        not isinstance(d, int) or d in (0, s) for d, s in zip(dims[1:], shape[1:], strict=True))
    if not fits:
        declared = "[" + ", ".join(str(d) for d in dims) + "]"
        raise _data_does_not_fit(data, shape, loaded.ref,
                                 f"its input {name!r} is declared as {declared}")


# a graph that batches correctly computes each sample alone; float reordering across a
# batch stays far below this, relative to the output's scale
BATCH_CHECK_REL_TOL = 1e-4


def fit_batch(loaded: LoadedModel, x: np.ndarray) -> LoadedModel:
    """An ONNX model whose input fixes the batch to 1: try the graph with a symbolic batch
    axis on two samples of ``x`` (the data the build feeds) and keep it when batch 2
    matches two runs of batch 1; otherwise run it one sample at a time. Some graphs
    reshape to batch 1 inside, so a symbolic input alone proves nothing: the run decides.
    Anything else comes back unchanged."""
    if loaded.onnx_path is None or len(x) < 2:
        return loaded
    _, dims = onnx_input_shape(loaded.onnx_path)
    if not dims or dims[0] != 1:
        return loaded
    try:
        data = _symbolic_batch(loaded.onnx_path)
        err = _batch2_error(data, x[:2])
    except Exception as e:  # the graph refuses batch 2: ORT's first line says where
        return _per_sample(loaded, f"batch 2 fails: {_first_line(e)}")
    if err > BATCH_CHECK_REL_TOL:
        return _per_sample(loaded, f"at batch 2 the outputs differ from batch 1 by {err:.2g} "
                                   "of their range (the graph reshapes to batch 1 inside)")
    mode = BatchMode("made-dynamic",
                     "the graph fixes the batch to 1; its batch axis was made symbolic "
                     f"(batch 2 matches two runs of batch 1: max difference {err:.2g} of "
                     "the output range)")
    return dataclasses.replace(loaded, batch=mode, onnx_bytes=data)


def pack_outputs(loaded: LoadedModel, x: np.ndarray) -> LoadedModel:
    """A model with several outputs as one with a single packed output (packing.py):
    a torch module wrapped, an ONNX graph with Reshape + Concat appended (run on ``x``,
    which the model is known to take). Models with one output come back unchanged."""
    if loaded.torch_model is not None:
        model, packing = pack_torch(loaded.torch_model, x, loaded.ref)
        return loaded if packing is None else dataclasses.replace(
            loaded, torch_model=model, packing=packing)
    try:
        packed = pack_onnx(loaded.onnx_source, x, loaded.batch.max_batch)
    except Exception as e:
        raise ModelLoadError(f"cannot pack the graph's outputs into one: {_first_line(e)}",
                             where=loaded.ref,
                             fix="check that onnxruntime runs the model on the data") from None
    if packed is None:
        return loaded
    return dataclasses.replace(loaded, onnx_bytes=packed[0], packing=packed[1])


def _first_line(e: Exception) -> str:
    """An onnxruntime error's first line without its status prefix, at most 200 chars."""
    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return re.sub(r"^\[ONNXRuntimeError\] : \d+ : \w+ : ", "", text)[:200]


def _per_sample(loaded: LoadedModel, why: str) -> LoadedModel:
    mode = BatchMode("per-sample", f"the graph fixes the batch to 1 and {why}; every run "
                                   "feeds one sample")
    return dataclasses.replace(loaded, batch=mode)


def _symbolic_batch(path: Path) -> bytes:
    """The graph with the first input's and the outputs' leading 1 named ``batch``; the
    stored intermediate shapes go (they state batch 1 too) and onnxruntime infers them."""
    import onnx

    model = onnx.load(str(path))
    weights = {t.name for t in model.graph.initializer}
    first = next(i for i in model.graph.input if i.name not in weights)
    for value in [first, *model.graph.output]:
        dims = value.type.tensor_type.shape.dim
        if len(dims) and dims[0].HasField("dim_value") and dims[0].dim_value == 1:
            dims[0].dim_param = "batch"
    del model.graph.value_info[:]
    return model.SerializeToString()


def _batch2_error(data: bytes, x: np.ndarray) -> float:
    """Largest difference between one batch-2 run and two batch-1 runs, relative to the
    outputs' range; a shape that is not (2, ...) raises."""
    sess = ort_session(data, log_level=4)  # the failure is ours to word, not ORT's to log
    name = sess.get_inputs()[0].name
    x = np.ascontiguousarray(x, dtype=np.float32)
    two = np.asarray(sess.run(None, {name: x})[0], dtype=np.float32)
    ones = np.concatenate([np.asarray(sess.run(None, {name: x[i:i + 1]})[0], np.float32)
                           for i in range(2)])
    if two.shape != ones.shape:
        raise ValueError(f"it gives outputs of shape {list(two.shape)}, not "
                         f"{list(ones.shape)}")
    scale = float(np.max(np.abs(ones))) or 1.0
    return float(np.max(np.abs(two - ones))) / scale
