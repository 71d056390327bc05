"""Data sets: load, split deterministically, and record exactly how inputs are formed.

Every later stage (calibration, validation, on-device bench) must feed the model the
same tensors, so the split, the input shape and the normalisation are decided here once
and written to the manifest.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from edgesmith.errors import DataError, UsageError
from edgesmith.inputs import InputSpec
from edgesmith.profiles.schema import Preprocess

from . import image_folder
from . import preprocess as pre
from .preprocess_spec import manifest_entry
from .refs import import_callable, is_callable_ref

SPLIT_FRACTIONS = {"train": 0.7, "calib": 0.1, "val": 0.2}
MIN_SAMPLES = 10


@dataclass(frozen=True)
class SplitRule:
    """How large the validation split is: SPLIT_FRACTIONS by default, or the user's
    ``--val-fraction`` / ``--val-samples``; train and calibration share the rest 7:1.
    Accuracy figures are only as sure as the validation split is large (see
    ``validate.resolution``), so this is the user's lever on them."""

    val_fraction: float | None = None
    val_samples: int | None = None

    def __post_init__(self) -> None:
        if self.val_fraction is not None and self.val_samples is not None:
            raise UsageError("--val-fraction and --val-samples both set the validation "
                             "split", fix="pass one of them")
        if self.val_fraction is not None and not 0 < self.val_fraction < 1:
            raise UsageError(f"--val-fraction {self.val_fraction}: expected a fraction "
                             "between 0 and 1 (exclusive)", fix="e.g. --val-fraction 0.3")
        if self.val_samples is not None and self.val_samples < 1:
            raise UsageError(f"--val-samples {self.val_samples}: expected at least 1",
                             fix="e.g. --val-samples 500")

    @property
    def default(self) -> bool:
        return self.val_fraction is None and self.val_samples is None

    def sizes(self, n: int, where: str) -> dict[str, int]:
        """Samples per split out of ``n``; each split keeps at least one."""
        if self.default:
            n_train = int(round(n * SPLIT_FRACTIONS["train"]))
            n_calib = int(round(n * SPLIT_FRACTIONS["calib"]))
            return {"train": n_train, "calib": n_calib, "val": n - n_train - n_calib}
        n_val = (self.val_samples if self.val_samples is not None
                 else int(round(n * self.val_fraction)))
        if not 1 <= n_val <= n - 2:
            asked = (f"--val-samples {self.val_samples}" if self.val_samples is not None
                     else f"--val-fraction {self.val_fraction} ({n_val} samples)")
            raise DataError(f"{asked} leaves {n - n_val} of the data's {n} samples for "
                            "training and calibration; each needs at least one",
                            where=where, fix=f"ask for 1..{n - 2} validation samples")
        share = SPLIT_FRACTIONS["train"] / (SPLIT_FRACTIONS["train"] + SPLIT_FRACTIONS["calib"])
        n_train = min(max(1, int(round((n - n_val) * share))), n - n_val - 1)
        return {"train": n_train, "calib": n - n_val - n_train, "val": n_val}

    def to_json(self) -> dict[str, Any]:
        return {"val_fraction": self.val_fraction, "val_samples": self.val_samples,
                "default_fractions": SPLIT_FRACTIONS if self.default else None}


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
    # each split's row numbers in the source's x, so an error can name the sample the user
    # finds in their own file; None when the source handed over its splits ready-made
    origin: dict[str, np.ndarray] | None = field(default=None, compare=False, repr=False)
    rule: SplitRule = field(default_factory=SplitRule)
    # image folders: class folder names (label = index), the preprocessing applied, and the
    # validation split's decoded HWC uint8 frames (what a device camera would hand over)
    classes: list[str] | None = None
    preprocess: dict[str, Any] | None = None
    val_frames: list[np.ndarray] | None = field(default=None, compare=False, repr=False)

    @property
    def sha256(self) -> str:
        h = hashlib.sha256()
        for a in (self.train_x, self.train_y, self.calib_x, self.calib_y, self.val_x, self.val_y):
            if isinstance(a, list):  # detection labels: per image a list of boxes
                h.update(json.dumps(a, separators=(",", ":")).encode())
            else:
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
            "split": self.rule.to_json(),
            "input": self.spec.to_json(),
            "classes": self.classes,
            "preprocess": self.preprocess,
        }


def split_indices(n: int, seed: int, rule: SplitRule = SplitRule(),
                  where: str = "data") -> dict[str, np.ndarray]:
    """A seeded permutation cut by ``rule``: same seed and rule, same split, on any
    machine (the default rule cuts exactly as SPLIT_FRACTIONS always did)."""
    order = np.random.default_rng(seed).permutation(n)
    sizes = rule.sizes(n, where)
    n_train, n_calib = sizes["train"], sizes["calib"]
    return {
        "train": order[:n_train],
        "calib": order[n_train:n_train + n_calib],
        "val": order[n_train + n_calib:],
    }


def _first_bad(mask: np.ndarray) -> tuple[int, int]:
    """(index of the first sample with any True, how many samples have one)."""
    per_sample = mask.reshape(len(mask), -1).any(axis=1)
    bad = np.flatnonzero(per_sample)
    return int(bad[0]), len(bad)


def _check_finite(x: np.ndarray, x32: np.ndarray, where: str) -> None:
    """NaN/Inf inputs poison every figure downstream (and then look like an optimiser or
    converter bug), so they are refused here, where the file and the sample are known."""
    bad32 = ~np.isfinite(x32)
    if not bad32.any():
        return
    i, count = _first_bad(bad32)
    if np.issubdtype(x.dtype, np.floating) and np.isfinite(x[i]).all():
        big = float(np.abs(x[i]).max())
        what = (f"sample {i} holds {big:.3g}, beyond float32's range (models run in float32)"
                f"; {count} sample(s) do")
        fix = "rescale or normalise the inputs before saving them"
    else:
        kinds = sorted({"NaN" if np.isnan(v) else "Inf" for v in x32[i][~np.isfinite(x32[i])]})
        what = f"sample {i} holds {'/'.join(kinds)}; {count} sample(s) hold NaN or Inf"
        fix = "drop or repair those samples (np.isfinite(x).all(axis=...) finds them)"
    raise DataError(f"x is not finite: {what}", where=where, fix=fix)


def _check_labels_nonnegative(y: np.ndarray, where: str) -> None:
    if (y < 0).any():
        i, count = _first_bad(y < 0)
        raise DataError(f"sample {i} has label {int(y[i])}; labels must be 0..num_classes-1 "
                        f"({count} negative)", where=where,
                        fix="store class indices 0..K-1 in y")


def _check_arrays(x: Any, y: Any, where: str,
                  real: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """``x`` as float32 and ``y`` as class ids, or, with ``real`` (--task regress|raw), as
    float32 target values of any shape per sample, each checked where the file is known."""
    x = np.asarray(x)
    y = np.asarray(y)
    if x.ndim < 2:
        raise DataError(f"x has shape {x.shape}; expected (N, ...) with one sample per row",
                        where=where, fix="store inputs as an array of shape (N, C, H, W)")
    if real:
        return _check_inputs(x, y, where), _real_targets(y, len(x), where)
    if y.ndim != 1:
        raise DataError(f"y has shape {y.shape}; expected (N,) integer class labels", where=where,
                        fix="for target values instead of classes pass --task regress "
                            "(or --task raw)")
    if not np.issubdtype(y.dtype, np.integer):
        if np.issubdtype(y.dtype, np.floating) and np.all(np.mod(y, 1) == 0):
            y = y.astype(np.int64)
        else:
            raise DataError(f"y has dtype {y.dtype}; expected integer class labels", where=where,
                            fix="for target values instead of classes pass --task regress "
                                "(or --task raw)")
    x32 = _check_inputs(x, y, where)
    y = y.astype(np.int64)
    _check_labels_nonnegative(y, where)
    return x32, y


def _check_inputs(x: np.ndarray, y: np.ndarray, where: str) -> np.ndarray:
    if len(x) != len(y):
        raise DataError(f"x has {len(x)} samples but y has {len(y)}", where=where,
                        fix="x and y must have one label per sample")
    if len(x) < MIN_SAMPLES:
        raise DataError(f"only {len(x)} samples; need at least {MIN_SAMPLES}", where=where)
    if not np.issubdtype(x.dtype, np.number) or np.iscomplexobj(x):
        raise DataError(f"x has dtype {x.dtype}; expected real numbers", where=where)
    with np.errstate(over="ignore", invalid="ignore"):
        x32 = np.ascontiguousarray(x, dtype=np.float32)
    _check_finite(x, x32, where)
    return x32


def _real_targets(y: np.ndarray, n: int, where: str) -> np.ndarray:
    """Regression / raw targets: numbers per sample (the metric compares them with the
    outputs), finite, as float32."""
    if y.ndim < 1 or len(y) != n or not np.issubdtype(y.dtype, np.number) \
            or np.iscomplexobj(y):
        raise DataError(f"y has shape {y.shape} and dtype {y.dtype}; expected real target "
                        f"values, one row per sample ({n})", where=where)
    with np.errstate(over="ignore", invalid="ignore"):
        y32 = np.ascontiguousarray(y, dtype=np.float32)
    bad = ~np.isfinite(y32)
    if bad.any():
        i, count = _first_bad(bad)
        raise DataError(f"y is not finite: sample {i} holds NaN or Inf (or a value beyond "
                        f"float32); {count} sample(s) do", where=where,
                        fix="drop or repair those samples")
    return y32


def _make(parts: dict[str, tuple[np.ndarray, np.ndarray]], source: str, seed: int,
          normalization: dict[str, Any], origin: dict[str, np.ndarray] | None = None,
          rule: SplitRule = SplitRule()) -> Splits:
    shapes = {k: parts[k][0].shape[1:] for k in ("train", "calib", "val")}
    if len(set(shapes.values())) > 1:
        listed = ", ".join(f"{k} {list(v)}" for k, v in shapes.items())
        raise DataError(f"the splits' samples differ in shape: {listed}", where=source,
                        fix="every split must hold samples of the one shape the model takes")
    num_classes = (max(int(parts[k][1].max()) for k in ("train", "calib", "val")) + 1
                   if np.issubdtype(parts["val"][1].dtype, np.integer) else 0)  # 0: targets
    spec = InputSpec(shape=tuple(int(d) for d in shapes["train"]), normalization=normalization)
    return Splits(
        train_x=parts["train"][0], train_y=parts["train"][1],
        calib_x=parts["calib"][0], calib_y=parts["calib"][1],
        val_x=parts["val"][0], val_y=parts["val"][1],
        spec=spec, num_classes=num_classes, source=source, seed=seed, origin=origin,
        rule=rule,
    )


def _from_arrays(x: np.ndarray, y: np.ndarray, source: str, seed: int,
                 normalization: dict[str, Any], rule: SplitRule = SplitRule()) -> Splits:
    """One (x, y) pair, split here by the seed; rows keep their place in the source."""
    idx = split_indices(len(x), seed, rule, source)
    parts = {k: (x[i], y[i]) for k, i in idx.items()}
    return _make(parts, source, seed, normalization, origin=idx, rule=rule)


def check_labels(splits: Splits, outputs: np.ndarray, model: str) -> None:
    """Every label must index one of the model's outputs: label 15 for a 10-class model
    would make every accuracy figure silently wrong. Called once the reference outputs
    are known, since only they tell the model's class count."""
    width = int(np.prod(outputs.shape[1:])) if outputs.ndim > 1 else 1
    if isinstance(splits.val_y, list) or not splits.num_classes \
            or splits.num_classes <= width:  # boxes, target values: the metric judges them
        return
    where, i, label, count = _first_label_beyond(splits, width)
    raise DataError(
        f"sample {i} has label {label}, but the model {model} has {width} output classes "
        f"(labels 0..{width - 1}); {count} sample(s) have a label >= {width}",
        where=where,
        fix=f"relabel the data to 0..{width - 1}, or give a model whose output has "
            f"{splits.num_classes} classes",
    )


def _first_label_beyond(splits: Splits, width: int) -> tuple[str, int, int, int]:
    """(where, sample index, label, count) of the lowest-numbered sample with label >= width."""
    hits = []
    count = 0
    for name in ("train", "calib", "val"):
        y = getattr(splits, f"{name}_y")
        if splits.origin is None and name == "calib" and y is splits.train_y:
            continue  # a callable without a calib split calibrates on train: count it once
        bad = np.flatnonzero(y >= width)
        count += len(bad)
        if len(bad):
            if splits.origin is None:
                hits.append((f"{splits.source}[{name}]", int(bad[0]), int(y[bad[0]])))
            else:
                rows = splits.origin[name][bad]
                j = int(np.argmin(rows))
                hits.append((splits.source, int(rows[j]), int(y[bad[j]])))
    if splits.origin is None:
        where, i, label = hits[0]
    else:
        where, i, label = min(hits, key=lambda h: h[1])
    return where, i, label, count


def digits(seed: int = 0, rule: SplitRule = SplitRule()) -> Splits:
    """sklearn's bundled 8x8 digits (no download): 1797 images as 1x8x8 floats in [-1, 1]."""
    from sklearn.datasets import load_digits

    bunch = load_digits()
    x = (bunch.images.astype(np.float32) / 16.0 - 0.5) / 0.5
    x = x[:, None, :, :]
    y = bunch.target.astype(np.int64)
    norm = {"raw_range": [0, 16], "scale": 1 / 16, "mean": 0.5, "std": 0.5,
            "formula": "(raw / 16 - 0.5) / 0.5"}
    return _from_arrays(x, y, "digits", seed, norm, rule)


_ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")  # a zip with members / an empty zip
_SAVE_HINT = "np.savez(path, x=inputs, y=labels)"


def _read_npz(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """``x`` and ``y`` of an npz; every way the file can be broken is a DataError."""
    where = str(path)
    try:
        with path.open("rb") as f:
            head = f.read(4)
    except OSError as e:
        raise DataError(f"cannot read the data file: {e.strerror or e}", where=where) from None
    if head[:4] not in _ZIP_MAGIC:
        what = "the file is empty" if not head else "the file is not an .npz archive (a zip)"
        raise DataError(what, where=where, fix=f"save the data with {_SAVE_HINT}")
    try:
        with np.load(path, allow_pickle=False) as z:
            keys = set(z.files)
            if not {"x", "y"} <= keys:
                raise DataError(
                    f"npz has keys {sorted(keys)}; expected 'x' (inputs) and 'y' (labels)",
                    where=where, fix=_SAVE_HINT,
                )
            return z["x"], z["y"]
    except DataError:
        raise
    except ValueError as e:
        if "pickle" in str(e):
            raise DataError("the npz holds object (pickled) arrays", where=where,
                            fix="save plain numeric arrays (no object arrays)") from None
        raise _corrupt(where, e) from None
    except (zipfile.BadZipFile, zlib.error, OSError, EOFError) as e:
        raise _corrupt(where, e) from None


def _corrupt(where: str, e: Exception) -> DataError:
    return DataError(f"the npz is truncated or corrupt ({type(e).__name__}: "
                     f"{str(e).splitlines()[0][:200] if str(e) else 'no detail'})",
                     where=where, fix=f"copy the file again, or re-save it with {_SAVE_HINT}")


def _from_npz(path: Path, seed: int, rule: SplitRule, real: bool = False) -> Splits:
    where = str(path)
    x, y = _check_arrays(*_read_npz(path), where, real)
    return _from_arrays(x, y, where, seed, {"formula": "as stored in the npz"}, rule)


def _from_callable(ref: str, seed: int, rule: SplitRule, real: bool = False) -> Splits:
    fn = import_callable(ref, DataError)
    try:
        result = fn()
    except Exception as e:  # user code: report, don't crash
        raise DataError(f"calling {ref} raised {type(e).__name__}: {e}", where=ref) from None
    if isinstance(result, dict):
        if not rule.default:
            raise UsageError(f"{ref} returns its own splits, so --val-fraction/--val-samples "
                             "cannot set the validation split", where=ref,
                             fix="drop the option, or return (x, y) and let edgesmith split")
        missing = {"train", "val"} - set(result)
        if missing:
            raise DataError(f"returned dict lacks {sorted(missing)}", where=ref,
                            fix="return (x, y) or {'train': (x, y), 'val': (x, y), 'calib': ...}")
        parts = {k: _check_arrays(*result[k], f"{ref}[{k}]", real) for k in ("train", "val")}
        parts["calib"] = (_check_arrays(*result["calib"], f"{ref}[calib]", real)
                          if "calib" in result else parts["train"])
        return _make(parts, ref, seed, {"formula": f"as returned by {ref}"})
    if isinstance(result, tuple | list) and len(result) == 2:
        x, y = _check_arrays(result[0], result[1], ref, real)
        return _from_arrays(x, y, ref, seed, {"formula": f"as returned by {ref}"}, rule)
    raise DataError(f"returned {type(result).__name__}; expected (x, y) or a dict of splits",
                    where=ref)


def _from_folder(root: Path, seed: int, rule: SplitRule, spec: Preprocess | None) -> Splits:
    """An ImageFolder tree (``image_folder.read``): sorted class folder names are the
    labels 0..K-1, every frame preprocessed by ``spec`` (none declared: the raw 0..255
    pixels as float32 NCHW)."""
    spec = spec or Preprocess()
    frames, _, labels, classes = image_folder.read(root, spec)
    x = pre.apply(frames, spec.model_dump(mode="json")).astype(np.float32)
    x, y = _check_arrays(x, np.asarray(labels, np.int64), str(root))
    source = "declared" if spec != Preprocess() else "default (none declared)"
    norm = {"formula": "image folder, preprocess as recorded", "preprocess": source}
    splits = _from_arrays(x, y, str(root), seed, norm, rule)
    layout = "NCHW" if spec.layout == "nchw" else "NHWC"
    return dataclasses.replace(
        splits, spec=dataclasses.replace(splits.spec, layout=layout),
        classes=classes, preprocess=manifest_entry(spec, source),
        val_frames=[frames[i] for i in splits.origin["val"]])


def _from_coco(root: Path, seed: int, rule: SplitRule) -> Splits:
    """A detection folder (``annotations.json`` in COCO's layout and its images, as
    ``detection.load_coco`` reads it): x as NCHW floats, y per image a list of
    (class, (x0, y0, x1, y1)) boxes, split by the seed like any other data."""
    from .detection import ANNOTATIONS, load_coco

    x, labels = load_coco(root)
    where = str(root / ANNOTATIONS)
    if len(x) < MIN_SAMPLES:
        raise DataError(f"only {len(x)} images; need at least {MIN_SAMPLES}", where=where)
    idx = split_indices(len(x), seed, rule, where)
    parts = {k: (x[i], [labels[j] for j in i]) for k, i in idx.items()}
    norm = {"raw_range": [0, 255], "formula": "(pixel / 255 - 0.5) / 0.5, RGB, NCHW"}
    classes = 1 + max((int(c) for objects in labels for c, _ in objects), default=0)
    return Splits(
        train_x=parts["train"][0], train_y=parts["train"][1],
        calib_x=parts["calib"][0], calib_y=parts["calib"][1],
        val_x=parts["val"][0], val_y=parts["val"][1],
        spec=InputSpec(shape=tuple(int(d) for d in x.shape[1:]), normalization=norm),
        num_classes=classes, source=str(root), seed=seed, origin=idx, rule=rule)


def _detection_folder(ref: str, task: str, from_cli: bool) -> bool:
    """Whether ``ref`` is read as a detection folder: ``--task detect`` asks for one (a
    folder without annotations.json gets load_coco's own error); a folder holding
    annotations.json under another task is refused, since its labels are boxes."""
    from .detection import ANNOTATIONS

    path = Path(ref)
    if task == "detect":
        if not path.is_dir():
            raise DataError(f"--task detect reads a folder with {ANNOTATIONS} (COCO) and its "
                            f"images; {ref!r} is not a folder", where=ref,
                            fix="python examples/detect/data.py DIR --n 1200 makes one")
        if from_cli:
            raise UsageError("--preprocess applies to class folders; a detection folder's "
                             "images are scaled as (pixel / 255 - 0.5) / 0.5",
                             fix="drop --preprocess")
        return True
    if path.is_dir() and (path / ANNOTATIONS).is_file():
        raise UsageError(f"{ref} holds {ANNOTATIONS}: its labels are boxes, not classes",
                         where=str(path / ANNOTATIONS), fix="pass --task detect")
    return False


REAL_TASKS = ("regress", "raw")  # labels are target values, not class ids


def load(ref: str, seed: int = 0, rule: SplitRule = SplitRule(),
         preprocess: Preprocess | None = None, preprocess_from_cli: bool = False,
         task: str = "classify") -> Splits:
    """``digits``, a ``.npz`` with ``x``/``y``, an image folder (one subfolder per class;
    with ``task`` detect: annotations.json and its images), or ``file.py:callable`` /
    ``module:callable``, split by ``rule`` (a callable returning ready-made splits keeps
    its own); with ``task`` regress or raw, ``y`` holds target values instead of class ids.
    ``preprocess`` turns an image folder's frames into inputs; a
    ``--preprocess`` for data that are already tensors is refused."""
    if _detection_folder(ref, task, preprocess_from_cli and preprocess is not None):
        return _from_coco(Path(ref), seed, rule)
    if Path(ref).is_dir():
        return _from_folder(Path(ref), seed, rule, preprocess)
    if preprocess_from_cli and preprocess is not None:
        raise UsageError(f"--preprocess applies to image folders; {ref!r} is already tensors",
                         fix="drop --preprocess, or pass a folder with one subfolder per class")
    if ref == "digits":
        return digits(seed, rule)
    real = task in REAL_TASKS
    if is_callable_ref(ref):
        return _from_callable(ref, seed, rule, real)
    path = Path(ref)
    if path.suffix == ".npz":
        if not path.is_file():
            raise DataError(f"data file {ref} does not exist", fix="check the --data path")
        return _from_npz(path, seed, rule, real)
    raise DataError(
        f"cannot tell what data {ref!r} is",
        fix="use `digits`, a .npz file with x and y arrays, an image folder (one subfolder "
            "per class), or file.py:callable",
    )
