"""Detection in Python: the generated scenes, decode + NMS, mAP over pycocotools, and the
COCO folder loader's errors. Small inputs (a few images, hand-made head maps)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from edgesmith.errors import DataError
from edgesmith.pipeline import detection

from .conftest import detect_module


def _maps_from_labels(labels, size=128, k=4):
    """Head outputs that say exactly the labels: the training targets as confident logits."""
    train = detect_module("train")
    per_image = [train.assign(objs, size, k) for objs in labels]
    levels = []
    for level in range(2):
        t = np.stack([m[level] for m in per_image])
        out = t.copy()
        out[:, 4:] = np.where(t[:, 4:] > 0.5, 12.0, -12.0)
        levels.append(out.astype(np.float32))
    return levels


def test_scenes_are_the_same_for_the_same_seed_and_differ_for_another(tmp_path):
    data = detect_module("data")
    a, objs_a = data.scene(7, 128, seed=1)
    b, objs_b = data.scene(7, 128, seed=1)
    c, _ = data.scene(7, 128, seed=2)
    assert np.array_equal(a, b) and objs_a == objs_b
    assert not np.array_equal(a, c)
    assert a.shape == (128, 128, 3) and a.dtype == np.uint8
    assert 1 <= len(objs_a) <= data.MAX_OBJECTS


def test_scenes_folder_loads_with_every_class_and_boxes_inside_the_image(scenes_dir):
    x, labels = detection.load_coco(scenes_dir)
    assert x.shape == (160, 3, 128, 128) and x.dtype == np.float32
    assert -1.0 <= x.min() and x.max() <= 1.0
    classes = {c for objs in labels for c, _ in objs}
    assert classes == {0, 1, 2, 3}
    boxes = np.array([b for objs in labels for _, b in objs])
    assert (boxes[:, 0] >= 0).all() and (boxes[:, 2] <= 128).all()
    assert (boxes[:, 2] - boxes[:, 0] >= 10).all()  # 12 px at the narrowest aspect


def test_labels_written_as_head_maps_decode_to_a_perfect_map(scenes_dir):
    _, labels = detection.load_coco(scenes_dir)
    labels = labels[:20]
    maps = _maps_from_labels(labels)
    assert detection.map50(maps, labels) == pytest.approx(1.0)
    assert detection.map50_95(maps, labels) == pytest.approx(1.0)


def test_wrong_classes_and_shifted_boxes_lower_the_map(scenes_dir):
    _, labels = detection.load_coco(scenes_dir)
    labels = labels[:20]
    maps = _maps_from_labels(labels)
    swapped = [m.copy() for m in maps]
    for m in swapped:  # every class logit moves one class on: every box has the wrong class
        m[:, 5:] = np.roll(m[:, 5:], 1, axis=1)
    assert detection.map50(swapped, labels) < 0.05
    shifted = [m.copy() for m in maps]
    for m in shifted:  # boxes 2.5x as wide, grown to the right: IoU 0.4
        m[:, 2] += 1.5 * (m[:, 0] + m[:, 2])
    assert detection.map50(shifted, labels) < 0.5
    assert detection.map50_95(shifted, labels) < detection.map50(maps, labels)


def test_packed_outputs_decode_as_the_separate_maps(scenes_dir):
    _, labels = detection.load_coco(scenes_dir)
    maps = _maps_from_labels(labels[:6])
    packed = np.concatenate([m.reshape(6, 9, -1) for m in maps], axis=2)  # (6, 9, 320)
    for (a, sa, ca), (b, sb, cb) in zip(detection.decode(packed), detection.decode(maps),
                                        strict=True):
        assert np.array_equal(a, b) and np.array_equal(sa, sb) and np.array_equal(ca, cb)
    with pytest.raises(ValueError, match="no set of square grids"):
        detection.decode(packed[:, :, :300])


def test_nms_keeps_the_best_of_overlapping_boxes_of_one_class_only():
    boxes = np.array([[0, 0, 10, 10], [1, 1, 11, 11], [1, 1, 11, 11], [50, 50, 60, 60]],
                     np.float32)
    scores = np.array([0.6, 0.9, 0.8, 0.5], np.float32)
    classes = np.array([0, 0, 1, 0])
    keep = detection.nms(boxes, scores, classes, iou_threshold=0.5)
    assert keep.tolist() == [1, 2, 3]  # 0 overlaps 1 (same class); 2 is another class
    assert detection.nms(boxes, scores, classes, max_boxes=2).tolist() == [1, 2]


def test_decode_places_a_cell_box_at_its_stride_and_scores_its_best_class():
    level8 = np.full((1, 9, 16, 16), -20.0, np.float32)
    level16 = np.full((1, 9, 8, 8), -20.0, np.float32)
    level8[0, :4, 2, 3] = [1.0, 0.5, 2.0, 1.5]  # row 2, column 3: centre (28, 20)
    level8[0, 4, 2, 3] = 3.0
    level8[0, 5:, 2, 3] = [0.0, 2.0, 1.0, 2.0]  # classes 1 and 3 tie: the first wins
    (boxes, scores, classes), = detection.decode([level8, level16], score_threshold=0.5)
    assert boxes.tolist() == [[20.0, 16.0, 44.0, 32.0]]
    sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    assert scores[0] == pytest.approx(sig(3.0) * sig(2.0), abs=1e-6)
    assert classes.tolist() == [1]


def test_decode_refuses_outputs_that_are_not_head_maps():
    with pytest.raises(ValueError, match="expected \\(N, 4 \\+ 1 \\+ classes, H, W\\)"):
        detection.decode([np.zeros((2, 10), np.float32)], strides=(8,))
    with pytest.raises(ValueError, match="pass one stride per output"):
        detection.decode([np.zeros((1, 9, 4, 4), np.float32)], strides=(8, 16))


@pytest.mark.parametrize("damage, expect", [
    ("no_json", "no annotations.json"),
    ("bad_json", "not valid JSON"),
    ("missing_image", "does not exist"),
    ("broken_image", "cannot decode the image"),
    ("box_outside", "annotation 1 has bbox"),
    ("unknown_category", "category_id 9"),
])
def test_a_broken_coco_folder_is_a_data_error_naming_the_file(tmp_path, damage, expect):
    detect_module("data").write(tmp_path, n=3, size=64, seed=0)
    ann = tmp_path / "annotations.json"
    doc = json.loads(ann.read_text())
    if damage == "no_json":
        ann.unlink()
    elif damage == "bad_json":
        ann.write_text('{"images": [\n  {"id": 1,}\n]}')
    elif damage == "missing_image":
        (tmp_path / doc["images"][1]["file_name"]).unlink()
    elif damage == "broken_image":
        (tmp_path / doc["images"][2]["file_name"]).write_bytes(b"\x89PNG\r\n\x1a\n broken")
    elif damage == "box_outside":
        doc["annotations"][0]["bbox"] = [50, 50, 30, 30]
    elif damage == "unknown_category":
        doc["annotations"][0]["category_id"] = 9
    if damage in ("box_outside", "unknown_category"):
        ann.write_text(json.dumps(doc))
    with pytest.raises(DataError, match=expect) as err:
        detection.load_coco(tmp_path)
    assert err.value.exit_code == 2
    where = {"bad_json": f"{ann}:2", "missing_image": doc["images"][1]["file_name"],
             "broken_image": doc["images"][2]["file_name"]}.get(damage, str(tmp_path))
    assert where in err.value.where
