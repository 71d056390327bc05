"""Data sets: load, split deterministically, and record exactly how inputs are formed.

Every later stage (calibration, validation, on-device bench) must feed the model the
same tensors, so the split, the input shape and the normalisation are decided here once
and written to the manifest.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from edgesmith.errors import DataError

from .refs import import_callable, is_callable_ref

SPLIT_FRACTIONS = {"train": 0.7, "calib": 0.1, "val": 0.2}
MIN_SAMPLES = 10


@dataclass(frozen=True)
class InputSpec:
    """How one input sample looks; the batch axis is not part of ``shape``."""

    shape: tuple[int, ...]
    name: str = "input"
    dtype: str = "float32"
    layout: str = "NCHW"
    normalization: dict[str, Any] = field(default_factory=dict)

    def batch_shape(self, n: int = 1) -> tuple[int, ...]:
        return (n, *self.shape)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["shape"] = list(self.shape)
        return d


@dataclass(frozen=True)
class Splits:
    """Train / calibration / validation arrays, plus what produced them."""

    train_x: np.ndarray
    train_y: np.ndarray
    calib_x: np.ndarray
    calib_y: np.ndarray
    val_x: np.ndarray
    val_y: np.ndarray
    spec: InputSpec
    num_classes: int
    source: str
    seed: int

    @property
    def sha256(self) -> str:
        h = hashlib.sha256()
        for a in (self.train_x, self.train_y, self.calib_x, self.calib_y, self.val_x, self.val_y):
            h.update(np.ascontiguousarray(a).tobytes())
        return h.hexdigest()

    def summary(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "seed": self.seed,
            "sha256": self.sha256,
            "num_classes": self.num_classes,
            "train": len(self.train_x),
            "calib": len(self.calib_x),
            "val": len(self.val_x),
            "input": self.spec.to_json(),
        }


def split(x: np.ndarray, y: np.ndarray, seed: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """A seeded permutation cut by SPLIT_FRACTIONS: same seed, same split, on any machine."""
    order = np.random.default_rng(seed).permutation(len(x))
    n_train = int(round(len(x) * SPLIT_FRACTIONS["train"]))
    n_calib = int(round(len(x) * SPLIT_FRACTIONS["calib"]))
    parts = {
        "train": order[:n_train],
        "calib": order[n_train:n_train + n_calib],
        "val": order[n_train + n_calib:],
    }
    return {k: (x[idx], y[idx]) for k, idx in parts.items()}


def _check_arrays(x: Any, y: Any, where: str) -> tuple[np.ndarray, np.ndarray]:
    x = np.asarray(x)
    y = np.asarray(y)
    if x.ndim < 2:
        raise DataError(f"x has shape {x.shape}; expected (N, ...) with one sample per row",
                        where=where, fix="store inputs as an array of shape (N, C, H, W)")
    if y.ndim != 1:
        raise DataError(f"y has shape {y.shape}; expected (N,) integer class labels", where=where)
    if len(x) != len(y):
        raise DataError(f"x has {len(x)} samples but y has {len(y)}", where=where,
                        fix="x and y must have one label per sample")
    if len(x) < MIN_SAMPLES:
        raise DataError(f"only {len(x)} samples; need at least {MIN_SAMPLES}", where=where)
    if not np.issubdtype(y.dtype, np.integer):
        if np.issubdtype(y.dtype, np.floating) and np.all(np.mod(y, 1) == 0):
            y = y.astype(np.int64)
        else:
            raise DataError(f"y has dtype {y.dtype}; expected integer class labels", where=where)
    if not np.issubdtype(x.dtype, np.number):
        raise DataError(f"x has dtype {x.dtype}; expected numbers", where=where)
    return np.ascontiguousarray(x, dtype=np.float32), y.astype(np.int64)


def _make(parts: dict[str, tuple[np.ndarray, np.ndarray]], source: str, seed: int,
          normalization: dict[str, Any]) -> Splits:
    x_all = np.concatenate([parts[k][0] for k in ("train", "calib", "val")])
    y_all = np.concatenate([parts[k][1] for k in ("train", "calib", "val")])
    num_classes = int(y_all.max()) + 1
    if y_all.min() < 0:
        raise DataError("labels must be 0..num_classes-1; found a negative label", where=source)
    spec = InputSpec(shape=tuple(int(d) for d in x_all.shape[1:]), normalization=normalization)
    return Splits(
        train_x=parts["train"][0], train_y=parts["train"][1],
        calib_x=parts["calib"][0], calib_y=parts["calib"][1],
        val_x=parts["val"][0], val_y=parts["val"][1],
        spec=spec, num_classes=num_classes, source=source, seed=seed,
    )


def digits(seed: int = 0) -> Splits:
    """sklearn's bundled 8x8 digits (no download): 1797 images as 1x8x8 floats in [-1, 1]."""
    from sklearn.datasets import load_digits

    bunch = load_digits()
    x = (bunch.images.astype(np.float32) / 16.0 - 0.5) / 0.5
    x = x[:, None, :, :]
    y = bunch.target.astype(np.int64)
    norm = {"raw_range": [0, 16], "scale": 1 / 16, "mean": 0.5, "std": 0.5,
            "formula": "(raw / 16 - 0.5) / 0.5"}
    return _make(split(x, y, seed), "digits", seed, norm)


def _from_npz(path: Path, seed: int) -> Splits:
    where = str(path)
    try:
        with np.load(path, allow_pickle=False) as z:
            keys = set(z.files)
            if not {"x", "y"} <= keys:
                raise DataError(
                    f"npz has keys {sorted(keys)}; expected 'x' (inputs) and 'y' (labels)",
                    where=where, fix="np.savez(path, x=inputs, y=labels)",
                )
            x, y = z["x"], z["y"]
    except DataError:
        raise
    except ValueError as e:
        raise DataError(f"cannot read npz: {e}", where=where,
                        fix="save plain numeric arrays (no object arrays)") from None
    except (OSError, EOFError) as e:
        raise DataError(f"cannot read npz: {e}", where=where) from None
    x, y = _check_arrays(x, y, where)
    return _make(split(x, y, seed), where, seed, {"formula": "as stored in the npz"})


def _from_callable(ref: str, seed: int) -> Splits:
    fn = import_callable(ref, DataError)
    try:
        result = fn()
    except Exception as e:  # user code: report, don't crash
        raise DataError(f"calling {ref} raised {type(e).__name__}: {e}", where=ref) from None
    if isinstance(result, dict):
        missing = {"train", "val"} - set(result)
        if missing:
            raise DataError(f"returned dict lacks {sorted(missing)}", where=ref,
                            fix="return (x, y) or {'train': (x, y), 'val': (x, y), 'calib': ...}")
        parts = {k: _check_arrays(*result[k], f"{ref}[{k}]") for k in ("train", "val")}
        parts["calib"] = (_check_arrays(*result["calib"], f"{ref}[calib]") if "calib" in result
                          else parts["train"])
        return _make(parts, ref, seed, {"formula": f"as returned by {ref}"})
    if isinstance(result, tuple | list) and len(result) == 2:
        x, y = _check_arrays(result[0], result[1], ref)
        return _make(split(x, y, seed), ref, seed, {"formula": f"as returned by {ref}"})
    raise DataError(f"returned {type(result).__name__}; expected (x, y) or a dict of splits",
                    where=ref)


def load(ref: str, seed: int = 0) -> Splits:
    """``digits``, a ``.npz`` with ``x``/``y``, or ``file.py:callable`` / ``module:callable``."""
    if ref == "digits":
        return digits(seed)
    if is_callable_ref(ref):
        return _from_callable(ref, seed)
    path = Path(ref)
    if path.suffix == ".npz":
        if not path.is_file():
            raise DataError(f"data file {ref} does not exist", fix="check the --data path")
        return _from_npz(path, seed)
    raise DataError(
        f"cannot tell what data {ref!r} is",
        fix="use `digits`, a .npz file with x and y arrays, or file.py:callable",
    )
