"""Declared preprocessing on the device side: an image-folder build keeps its validation
frames raw (HWC uint8) with their labels; `edgesmith bench --local` preprocesses them in
the bench script (stdlib, for in-process runtimes) or in the C harness (es_preprocess_u8
with model.h's spec) and scores top-1, which must equal the build's own validation.

The folder is drawn here with Pillow (3 classes x 30 noisy 40x40 images whose colours
overlap, so a wrong pixel moves the score) and a small CNN is trained on it for a few
seconds; nothing downloads."""

from __future__ import annotations

import ast
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from edgesmith.devices import remote_preprocess as rp
from edgesmith.pipeline import preprocess as pre
from edgesmith.targets import codegen

pytestmark = pytest.mark.slow

SPEC = "resize=36x36,crop=32x32,mean=120/128/136,std=60/64/70"
CLASSES = ("amber", "moss", "sky")
NET = '''
import torch.nn as nn

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
            nn.Flatten(), nn.Linear(16, 3))

    def forward(self, x):
        return self.body(x)

def build():
    return Net()
'''


def _cli(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    code = "import sys; from edgesmith.cli import main; sys.argv = ['edgesmith', " \
           "*sys.argv[1:]]; main()"
    return subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True,
                          text=True, timeout=timeout)


def _folder(root: Path, per_class: int = 30, size: int = 40) -> Path:
    """One class per colour tint, each image with a random tint of all three channels as
    well, so the classes overlap (the net scores about half) and a wrong pixel anywhere
    moves a prediction."""
    rng = np.random.default_rng(7)
    for c, name in enumerate(CLASSES):
        (root / name).mkdir(parents=True)
        for i in range(per_class):
            tint = rng.integers(0, 70, 3)
            tint[c] += 25
            img = (rng.integers(0, 160, (size, size, 3)) + tint).clip(0, 255).astype(np.uint8)
            Image.fromarray(img).save(root / name / f"{i:03d}.png")
    return root


def _train(tmp: Path, folder: Path) -> tuple[Path, str]:
    """A state dict of NET trained briefly on the folder's train split (as the build
    splits and preprocesses it)."""
    import torch

    from edgesmith.pipeline import data
    from edgesmith.pipeline.preprocess_spec import parse_cli

    (tmp / "net.py").write_text(NET)
    sys.path.insert(0, str(tmp))
    try:
        import net  # noqa: PLC0415
    finally:
        sys.path.pop(0)
    s = data.load(str(folder), preprocess=parse_cli(SPEC))
    torch.manual_seed(0)
    model = net.build()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    x, y = torch.from_numpy(s.train_x), torch.from_numpy(s.train_y)
    for _ in range(40):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
    sys.modules.pop("net", None)
    path = tmp / "net.pt"
    torch.save(model.state_dict(), path)
    return path, f"{tmp / 'net.py'}:build"


@pytest.fixture(scope="module")
def frames_build(tmp_path_factory) -> Path:
    """`edgesmith build` of the trained net on the image folder: onnx fp32 and c int8."""
    tmp = tmp_path_factory.mktemp("frames")
    folder = _folder(tmp / "imgs")
    ckpt, arch = _train(tmp, folder)
    out = tmp / "build"
    r = _cli("build", ckpt, "--arch", arch, "--data", folder, "--profile", "host",
             "--target", "onnx:fp32", "--target", "c:int8", "--preprocess", SPEC,
             "--no-budget", "--out", out)
    assert r.returncode == 0, r.stdout + r.stderr
    return out


def _val_x(build: Path) -> np.ndarray:
    """The build's validation inputs, as the host made them from the same folder."""
    from edgesmith.pipeline import data
    from edgesmith.pipeline.preprocess_spec import parse_cli

    return data.load(_manifest(build)["inputs"]["data"], preprocess=parse_cli(SPEC)).val_x


def _manifest(build: Path) -> dict:
    return json.loads((build / "manifest.json").read_text())


def _c_folder(build: Path) -> Path:
    t = next(t for t in _manifest(build)["targets"] if t["name"] == "c-int8")
    return build / t["path"]


def test_the_build_keeps_the_validation_frames_raw_with_their_labels(frames_build):
    from edgesmith.pipeline import data
    from edgesmith.pipeline.preprocess_spec import parse_cli

    m = _manifest(frames_build)
    assert m["bench_data"]["frames"] == "data/bench_frames.json"
    index = json.loads((frames_build / "data" / "bench_frames.json").read_text())
    s = data.load(m["inputs"]["data"], preprocess=parse_cli(SPEC))
    assert index["runs"] == [[len(s.val_y), 40, 40]] and index["val_samples"] == len(s.val_y)
    assert index["labels"] == s.val_y.tolist() and index["classes"] == list(CLASSES)
    raw = (frames_build / "data" / "bench_frames.u8").read_bytes()
    assert raw == b"".join(f.tobytes() for f in s.val_frames)


def _copy(build: Path, tmp: Path) -> Path:
    """A private copy: a bench writes bench/ and manifest.json into its build."""
    import shutil

    return Path(shutil.copytree(build, tmp / "build"))


def test_local_bench_scores_the_raw_frames_as_the_build_validated(frames_build, tmp_path):
    build = _copy(frames_build, tmp_path)
    r = _cli("bench", build, "--local", "--runs", "3", "--warmup", "0", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    got = {t["name"]: t for t in json.loads(r.stdout)["devices"]["local"]["targets"]}
    built = {t["name"]: t for t in _manifest(build)["targets"]}
    assert set(got) == {"onnx-fp32", "c-int8"}
    for name, t in got.items():
        acc = t["accuracy"]
        assert t["status"] == "ok" and "error" not in acc, (name, t)
        # every validation frame, preprocessed on the device, scored as the build scored
        # the host-preprocessed tensors
        assert acc["frames"] == acc["val_samples"] == built[name]["samples"] == 18
        assert acc["top1"] == built[name]["accuracy"], (name, acc, built[name]["accuracy"])
        assert t["parity"]["samples"] == 16  # parity stays on the bench tensors, beside it
    assert got["onnx-fp32"]["accuracy"]["preprocess"].startswith("device script")
    # the inputs the script made are the build's own validation tensors, bit for bit
    val_x = _val_x(build)
    assert got["onnx-fp32"]["accuracy"]["inputs_sha256"] == \
        hashlib.sha256(val_x.astype("<f4").tobytes()).hexdigest()
    assert got["c-int8"]["accuracy"]["preprocess"].startswith("C harness")
    assert 0.2 < got["onnx-fp32"]["accuracy"]["top1"] < 0.9  # not a score any input gets
    # the console table shows the frames' top-1 beside parity's agreement
    from rich.console import Console

    from edgesmith.cli.bench import results_table
    from edgesmith.devices.verdict import BenchRun

    console = Console(width=200, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
    console.print(results_table(BenchRun(build, json.loads(r.stdout)["devices"])))
    text = console.export_text()
    assert "frames top-1" in text and f"{got['c-int8']['accuracy']['top1']:.2%}" in text


def _harness(build: Path, tmp: Path) -> Path:
    """The build's c-int8 sources, made here: the folder with its edgesmith_bench."""
    import shutil

    from edgesmith.targets import run

    folder = Path(shutil.copytree(_c_folder(build), tmp / "c"))
    run.build(folder)
    return folder


def _bench(folder: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(folder / "edgesmith_bench"), "--weights",
                           str(folder / "weights.bin"), *map(str, args)],
                          capture_output=True, text=True, timeout=120)


def test_c_harness_fed_raw_frames_equals_the_python_path(frames_build, tmp_path):
    from edgesmith.pipeline.preprocess_spec import as_dict, parse_cli
    from edgesmith.targets import run

    folder = _harness(frames_build, tmp_path)
    index = json.loads((frames_build / "data" / "bench_frames.json").read_text())
    raw = (frames_build / "data" / "bench_frames.u8").read_bytes()
    frames = np.frombuffer(raw, np.uint8).reshape(-1, 40, 40, 3)
    labels = tmp_path / "labels.txt"
    labels.write_text(" ".join(map(str, index["labels"])))
    out = tmp_path / "out.raw"
    r = _bench(folder, "--frames", frames_build / "data" / "bench_frames.u8", "--frame-hw",
               40, 40, "--labels", labels, "--output", out)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout.strip().splitlines()[-1])
    # the same harness on the host-preprocessed tensors (pipeline/preprocess.py)
    x = pre.apply(frames, as_dict(parse_cli(SPEC))).astype(np.float32)
    want = run.run(folder, x)
    got = np.fromfile(out, np.float32).reshape(want.shape)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))  # bit for bit
    python_top1 = float((want.argmax(1) == np.asarray(index["labels"])).mean())
    c_int8 = next(t for t in _manifest(frames_build)["targets"] if t["name"] == "c-int8")
    assert doc["frames"] == 18 and doc["input_hw"] == [32, 32]
    assert doc["top1"] == pytest.approx(python_top1, abs=1e-6)
    assert doc["top1"] == pytest.approx(c_int8["accuracy"], abs=1e-6)
    assert doc["correct"] == round(python_top1 * 18)

    # a camera of another size: the spec's resize takes it to the model's input
    odd = np.random.default_rng(3).integers(0, 256, (4, 23, 57, 3), dtype=np.uint8)
    (tmp_path / "odd.u8").write_bytes(odd.tobytes())
    r = _bench(folder, "--frames", tmp_path / "odd.u8", "--frame-hw", 23, 57, "--output", out)
    assert r.returncode == 0, r.stderr
    want = run.run(folder, pre.apply(odd, as_dict(parse_cli(SPEC))).astype(np.float32))
    assert np.array_equal(np.fromfile(out, np.float32).reshape(want.shape), want)
    assert json.loads(r.stdout.strip().splitlines()[-1])["top1"] is None  # no labels given


def test_frames_that_do_not_fill_the_file_are_refused(frames_build, tmp_path):
    folder = _harness(frames_build, tmp_path)
    r = _bench(folder, "--frames", frames_build / "data" / "bench_frames.u8",
               "--frame-hw", 40, 41)
    assert r.returncode == 1
    assert "not a whole number of 4920-byte frames" in r.stderr


def test_a_harness_without_a_spec_refuses_frames(frames_build, tmp_path):
    (tmp_path / "f.u8").write_bytes(bytes(8 * 8 * 3))
    spec_free = _unspecified_harness(frames_build, tmp_path)
    r = _bench(spec_free, "--frames", tmp_path / "f.u8", "--frame-hw", 8, 8)
    assert r.returncode == 2 and "no ES_PREPROCESS_SPEC" in r.stderr


def _unspecified_harness(build: Path, tmp: Path) -> Path:
    """The same model generated without a preprocess block."""
    from edgesmith.targets import run

    folder = tmp / "plain"
    codegen.from_onnx(build / "targets" / "onnx-fp32" / "model.onnx", folder)
    run.build(folder)
    return folder


def test_a_model_without_a_spec_gets_no_preprocessing_sources(frames_build, tmp_path):
    folder = _unspecified_harness(frames_build, tmp_path)
    assert "ES_PREPROCESS" not in (folder / "model.h").read_text()
    assert "es_preprocess" not in (folder / "Makefile").read_text()
    assert not (folder / "es_preprocess.c").exists()
    with_spec = _c_folder(frames_build)
    assert "#define ES_PREPROCESS_SPEC" in (with_spec / "model.h").read_text()
    assert "es_preprocess.c" in (with_spec / "Makefile").read_text().split("SRCS =")[1]


def test_a_truncated_frames_file_is_refused_before_any_upload(frames_build, tmp_path):
    build = _copy(frames_build, tmp_path)
    data = build / "data" / "bench_frames.u8"
    data.write_bytes(data.read_bytes()[:-7])
    r = _cli("bench", build, "--local", "--runs", "2", "--warmup", "0")
    assert r.returncode == 2, r.stdout + r.stderr
    assert str(data) in r.stderr.replace("\n", "") and "Traceback" not in r.stderr
    assert "rebuild" in r.stderr and not (build / "bench" / "local.json").exists()


def test_a_frames_index_with_missing_labels_is_refused(frames_build, tmp_path):
    build = _copy(frames_build, tmp_path)
    index = build / "data" / "bench_frames.json"
    doc = json.loads(index.read_text())
    doc["labels"] = doc["labels"][:-1]
    index.write_text(json.dumps(doc))
    r = _cli("bench", build, "--local", "--runs", "2", "--warmup", "0")
    assert r.returncode == 2, r.stdout + r.stderr
    assert "17 labels for 18 frames" in r.stderr and "Traceback" not in r.stderr


# -- the stdlib part, without a build --------------------------------------------------------
SPECS = [
    {},
    {"resize": [32, 32]},
    {"resize": [17, 29], "center_crop": [11, 20], "channel_order": "bgr"},
    {"resize": [80, 60], "mean": [123.7, 116.3, 103.5], "std": [58.4, 57.1, 57.4]},
    {"center_crop": [5, 7], "layout": "nhwc", "dtype": "uint8"},
    {"resize": [9, 9], "dtype": "int8", "layout": "nhwc", "channel_order": "bgr"},
    {"mean": [0.1], "std": [0.3], "resize": [13, 41]},
]


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: ",".join(s) or "none")
def test_stdlib_preprocessing_is_the_host_arithmetic_bit_for_bit(spec):
    rng = np.random.default_rng(len(str(spec)))
    for h, w in [(40, 40), (23, 31), (7, 9), (64, 48)]:
        frame = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        want = pre.apply_one(frame, spec).astype(np.float32)
        flat, shape = rp.preprocess_frame(frame.tobytes(), h, w, spec)
        got = np.asarray(flat, np.float32).reshape(shape)
        assert got.shape == want.shape
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), (spec, h, w)


def test_frames_of_several_sizes_are_read_run_by_run(tmp_path):
    rng = np.random.default_rng(5)
    frames = [rng.integers(0, 256, hw + (3,), dtype=np.uint8)
              for hw in [(12, 10), (12, 10), (30, 8), (9, 9)]]
    (tmp_path / "f.u8").write_bytes(b"".join(f.tobytes() for f in frames))
    (tmp_path / "f.json").write_text(json.dumps(
        {"data": "f.u8", "runs": [[2, 12, 10], [1, 30, 8], [1, 9, 9]], "labels": [0, 1, 2, 0]}))
    spec = {"resize": [8, 8], "mean": [100.0], "std": [50.0], "layout": "nhwc"}
    index = rp.read_index(str(tmp_path / "f.json"))
    got, seen = [], []
    for n, h, w, data, labels in rp.frame_runs(index):
        size = h * w * 3
        got += [rp.preprocess_frame(data[i * size:(i + 1) * size], h, w, spec)[0]
                for i in range(n)]
        seen += labels
    assert seen == [0, 1, 2, 0]
    want = pre.apply(frames, spec)
    assert np.array_equal(np.asarray(got, np.float32).reshape(want.shape), want)


@pytest.mark.parametrize("doc,words", [
    ({"data": "../f.u8", "runs": [[1, 2, 2]], "labels": [0]}, "a file beside it"),
    ({"data": "f.u8", "runs": [[1, 2, 2]], "labels": [0, 1]}, "2 labels for 1 frames"),
    ({"data": "f.u8", "runs": [[1, 3, 2]], "labels": [0]}, "should hold 18 bytes"),
    ({"data": "f.u8", "runs": [[1, 2]], "labels": [0]}, "runs must be"),
])
def test_a_broken_index_is_named_on_the_device(tmp_path, doc, words):
    (tmp_path / "f.u8").write_bytes(bytes(12))
    (tmp_path / "f.json").write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=words):
        rp.read_index(str(tmp_path / "f.json"))


def test_the_device_part_needs_nothing_but_the_standard_library():
    tree = ast.parse(Path(rp.__file__).read_text())
    names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import)
             for a in n.names}
    names |= {n.module.split(".")[0] for n in ast.walk(tree)
              if isinstance(n, ast.ImportFrom) and n.module}
    assert names <= set(sys.stdlib_module_names), names
