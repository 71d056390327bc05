"""Image folders as the ImageFolder convention lays them out: one subfolder per class,
sorted names as labels, every image decoded by Pillow into an HWC uint8 RGB frame (what a
device camera hands over) with an error naming the file it could not read."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from edgesmith.errors import DataError
from edgesmith.profiles.schema import Preprocess

IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".ppm", ".pgm", ".tif",
                  ".tiff"}
FOLDER_HINT = ("one subfolder per class (data/cat/*.jpg, data/dog/*.jpg), as torchvision's "
               "ImageFolder")


def _class_folders(root: Path) -> list[Path]:
    """The class subfolders, sorted by name (label = position); hidden ones skipped."""
    folders = sorted((p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")),
                     key=lambda p: p.name)
    if not folders:
        raise DataError("the folder has no class subfolders", where=str(root), fix=FOLDER_HINT)
    return folders


def _image_files(folder: Path) -> list[Path]:
    files = sorted(p for p in folder.iterdir()
                   if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
    if not files:
        raise DataError(f"class folder {folder.name!r} holds no images "
                        f"({', '.join(sorted(IMAGE_SUFFIXES))})", where=str(folder),
                        fix="put the class's images in it, or remove the empty folder")
    return files


def decode(path: Path) -> np.ndarray:
    """One image file as an HWC uint8 RGB frame (Pillow), or a DataError naming it."""
    from PIL import Image

    try:
        with Image.open(path) as im:
            return np.asarray(im.convert("RGB"), dtype=np.uint8)
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as e:
        raise DataError(f"cannot decode the image: {type(e).__name__}: {e}", where=str(path),
                        fix="replace or delete the file (Pillow must be able to open it)") from None


def _same_size(frames: list[np.ndarray], files: list[Path], spec: Preprocess) -> None:
    """Frames of different sizes give different input shapes unless a resize (or a crop
    every frame can hold) brings them to one; say which two files differ."""
    sizes = {f.shape[:2] for f in frames}
    if len(sizes) == 1 or spec.resize:
        return
    if spec.center_crop:
        small = next((i for i, f in enumerate(frames)
                      if f.shape[0] < spec.center_crop[0] or f.shape[1] < spec.center_crop[1]),
                     None)
        if small is None:
            return
        h, w = frames[small].shape[:2]
        raise DataError(f"the image is {h}x{w}, smaller than center_crop "
                        f"{spec.center_crop[0]}x{spec.center_crop[1]}", where=str(files[small]),
                        fix="declare a resize (--preprocess resize=HxW,...) or a smaller crop")
    first = frames[0].shape[:2]
    other = next(i for i, f in enumerate(frames) if f.shape[:2] != first)
    raise DataError(f"images differ in size: {files[0]} is {first[0]}x{first[1]}, "
                    f"{files[other]} is {frames[other].shape[0]}x{frames[other].shape[1]}",
                    where=str(files[other].parent.parent),
                    fix="declare a resize in the preprocess block (--preprocess "
                        "resize=HxW,...) or resize the files")


def read(root: Path, spec: Preprocess) -> tuple[list[np.ndarray], list[Path], list[int],
                                                list[str]]:
    """(frames, their files, their labels, the class names) of an image folder; frames
    whose sizes ``spec`` cannot bring to one are refused naming two files."""
    classes = _class_folders(root)
    files: list[Path] = []
    labels: list[int] = []
    for label, folder in enumerate(classes):
        found = _image_files(folder)
        files += found
        labels += [label] * len(found)
    frames = [decode(f) for f in files]
    _same_size(frames, files, spec)
    return frames, files, labels, [c.name for c in classes]
