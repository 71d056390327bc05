"""Image folders (one subfolder per class, decoded with Pillow) with declared preprocessing:
labels from sorted class names, the spec applied and recorded, and every broken folder an
exit 2 naming the folder or file. Folders are drawn here with Pillow; nothing downloads."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from edgesmith.errors import DataError, ProfileError, UsageError
from edgesmith.pipeline import data, preprocess
from edgesmith.pipeline.preprocess_spec import checked, parse_cli

MODEL = '''
import torch.nn as nn

def build():
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                         nn.Flatten(), nn.Linear(4, 3))
'''
CLASSES = ("cat", "dog", "eel")


def _folder(root: Path, per_class: int = 8, size: tuple[int, int] = (20, 24),
            sizes: list[tuple[int, int]] | None = None) -> Path:
    """A class per colour (red/green/blue-ish, noisy), PNG files, one subfolder per class."""
    rng = np.random.default_rng(0)
    for c, name in enumerate(CLASSES):
        (root / name).mkdir(parents=True)
        for i in range(per_class):
            h, w = sizes[i % len(sizes)] if sizes else size
            img = rng.integers(0, 90, (h, w, 3), dtype=np.uint8)
            img[:, :, c] += 160
            Image.fromarray(img).save(root / name / f"{i:03d}.png")
    return root


def _model(tmp: Path) -> str:
    (tmp / "net.py").write_text(MODEL)
    return f"{tmp / 'net.py'}:build"


def test_sorted_class_folders_are_the_labels_and_the_spec_shapes_the_input(tmp_path):
    root = _folder(tmp_path / "imgs")
    spec = parse_cli("resize=18x18,crop=16x16,mean=127.5,std=127.5")
    s = data.load(str(root), preprocess=spec)
    assert s.classes == list(CLASSES) and s.num_classes == 3
    assert s.spec.shape == (3, 16, 16)
    assert s.preprocess["resize"] == [18, 18] and s.preprocess["center_crop"] == [16, 16]
    # the val inputs are exactly the Python reference path applied to the val frames
    want = preprocess.apply(s.val_frames, spec.model_dump(mode="json"))
    assert np.array_equal(s.val_x, want)
    # and each label is its folder's: red frames are class 0 ("cat")
    red = np.array([f[:, :, 0].mean() > f[:, :, 1:].mean() for f in s.val_frames])
    assert np.array_equal(red, s.val_y == 0)


def test_nhwc_layout_is_recorded_in_the_input_spec(tmp_path):
    s = data.load(str(_folder(tmp_path / "imgs")), preprocess=parse_cli("layout=nhwc"))
    assert s.spec.layout == "NHWC" and s.spec.shape == (20, 24, 3)


def test_an_empty_folder_is_an_input_error(tmp_path):
    (tmp_path / "imgs").mkdir()
    with pytest.raises(DataError, match="no class subfolders") as e:
        data.load(str(tmp_path / "imgs"))
    assert e.value.where == str(tmp_path / "imgs")


def test_a_class_folder_without_images_is_named(tmp_path):
    root = _folder(tmp_path / "imgs")
    (root / "fox").mkdir()
    (root / "fox" / "notes.txt").write_text("no images here")
    with pytest.raises(DataError, match="'fox' holds no images") as e:
        data.load(str(root))
    assert e.value.where == str(root / "fox")


def test_an_undecodable_image_names_the_file(cli, tmp_path):
    root = _folder(tmp_path / "imgs")
    bad = root / "dog" / "005.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n" + b"garbage" * 10)
    r = cli("convert", _model(tmp_path), "--data", str(root), "--target", "onnx:fp32",
            "--out", str(tmp_path / "out"))
    assert r.code == 2, (r.code, r.out, r.err)
    assert str(bad) in r.err and "cannot decode" in r.err and "Traceback" not in r.err


def test_mixed_sizes_without_a_resize_name_two_files(cli, tmp_path):
    root = _folder(tmp_path / "imgs", sizes=[(20, 24), (30, 24)])
    r = cli("convert", _model(tmp_path), "--data", str(root), "--target", "onnx:fp32",
            "--out", str(tmp_path / "out"))
    assert r.code == 2, (r.code, r.out, r.err)
    assert "images differ in size" in r.err and "declare a resize" in r.err
    assert "20x24" in r.err and "30x24" in r.err
    # a declared resize makes the same folder loadable
    s = data.load(str(root), preprocess=parse_cli("resize=16x16"))
    assert s.spec.shape == (3, 16, 16)


@pytest.mark.parametrize("text,words", [
    ("resize=16", "HEIGHTxWIDTH"),
    ("crop=20x20,resize=16x16", "larger than resize"),
    ("mean=1/2", "1 or 3"),
    ("dtype=uint8,mean=127", "float32 only"),
    ("std=0", "std must be > 0"),
    ("order=grb", "channel_order"),
    ("size=3x3", "KEY=VALUE"),
])
def test_a_bad_preprocess_flag_is_a_usage_error(text, words):
    with pytest.raises(UsageError, match=words):
        parse_cli(text)


def test_a_preprocess_yaml_file_is_read(tmp_path):
    f = tmp_path / "pre.yaml"
    f.write_text("preprocess:\n  resize: [8, 8]\n  channel_order: bgr\n")
    spec = parse_cli(str(f))
    assert spec.resize == [8, 8] and spec.channel_order == "bgr"


def test_a_profile_block_is_checked_like_the_flag():
    from edgesmith.profiles.schema import Preprocess

    with pytest.raises(ProfileError, match="larger than resize"):
        checked(Preprocess(resize=[4, 4], center_crop=[5, 5]), "profile x", ProfileError)


def test_preprocess_for_tensor_data_is_refused(cli, tmp_path):
    r = cli("convert", _model(tmp_path), "--data", "digits", "--preprocess", "resize=8x8",
            "--target", "onnx:fp32", "--out", str(tmp_path / "out"))
    assert r.code == 2 and "applies to image folders" in r.err


def test_an_image_folder_build_records_classes_and_spec(cli, tmp_path):
    root = _folder(tmp_path / "imgs")
    out = tmp_path / "out"
    r = cli("convert", _model(tmp_path), "--data", str(root), "--target", "onnx:fp32",
            "--preprocess", "resize=16x16,mean=127.5,std=127.5,order=bgr", "--out", str(out))
    assert r.code == 0, (r.code, r.out, r.err)
    m = json.loads((out / "manifest.json").read_text())
    assert m["data"]["classes"] == list(CLASSES)
    pre = m["data"]["preprocess"]
    assert pre["resize"] == [16, 16] and pre["channel_order"] == "bgr"
    assert pre["mean"] == [127.5] and "bilinear" in pre["resize_rule"]
    assert m["profile"]["preprocess"]["resize"] == [16, 16]  # what converters were given
    assert m["input"]["shape"] == [3, 16, 16]
