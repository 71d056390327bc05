"""es_preprocess_u8 (C) against pipeline/preprocess.py: bit for bit, compiled with the real
compiler (-Wall -Wextra -Werror, ASan + UBSan), over resizes up and down, odd sizes,
crops, channel orders, layouts and dtypes."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from edgesmith.pipeline import preprocess
from tests.conftest import ROOT, require_tools

RUNTIME = ROOT / "targets" / "runtime"
DTYPES = {"float32": (0, np.float32), "uint8": (1, np.uint8), "int8": (2, np.int8)}

DRIVER = r"""
#include <stdio.h>
#include <stdlib.h>
#include "es_preprocess.h"
/* driver FRAME H W RH RW CH CW BGR NHWC DTYPE M0 M1 M2 S0 S1 S2 OUT */
int main(int argc, char **argv) {
    es_preprocess_spec s;
    static uint8_t frame[1 << 22];
    static float out[1 << 22];
    int h, w, c, rc;
    size_t n;
    FILE *f;
    if (argc != 18) return 2;
    h = atoi(argv[2]); w = atoi(argv[3]);
    s.resize_h = atoi(argv[4]); s.resize_w = atoi(argv[5]);
    s.crop_h = atoi(argv[6]); s.crop_w = atoi(argv[7]);
    s.bgr = atoi(argv[8]); s.nhwc = atoi(argv[9]); s.dtype = atoi(argv[10]);
    for (c = 0; c < 3; ++c) {
        s.mean[c] = strtof(argv[11 + c], NULL);
        s.std[c] = strtof(argv[14 + c], NULL);
    }
    f = fopen(argv[1], "rb");
    if (!f || fread(frame, 1, (size_t)h * w * 3, f) != (size_t)h * w * 3) return 3;
    fclose(f);
    rc = es_preprocess_u8(frame, h, w, &s, out);
    if (rc != 0) { printf("rc %d\n", rc); return 4; }
    n = es_preprocess_out_bytes(&s, h, w);
    f = fopen(argv[17], "wb");
    if (!f || fwrite(out, 1, n, f) != n) return 5;
    fclose(f);
    return 0;
}
"""

CASES = [
    # (frame h, w, spec)
    (32, 32, {}),
    (32, 32, {"resize": [32, 32]}),
    (37, 53, {"resize": [24, 24], "mean": [123.675, 116.28, 103.53],
              "std": [58.395, 57.12, 57.375]}),
    (17, 9, {"resize": [40, 31], "center_crop": [33, 30], "channel_order": "bgr"}),
    (64, 48, {"resize": [36, 36], "center_crop": [32, 32], "layout": "nhwc",
              "mean": [127.5], "std": [127.5]}),
    (20, 30, {"center_crop": [11, 7], "dtype": "uint8"}),
    (31, 29, {"resize": [16, 15], "dtype": "int8", "channel_order": "bgr",
              "layout": "nhwc"}),
    (1, 1, {"resize": [5, 3]}),
    (200, 3, {"resize": [7, 13], "mean": [0.5, 1.5, 2.5], "std": [0.3, 3.0, 300.0]}),
]


@pytest.fixture(scope="module")
def driver(tmp_path_factory) -> Path:
    require_tools("gcc")
    cc = shutil.which("gcc")
    d = tmp_path_factory.mktemp("pre")
    (d / "driver.c").write_text(DRIVER)
    exe = d / "driver"
    subprocess.run([cc, "-std=c99", "-O2", "-Wall", "-Wextra", "-Werror",
                    "-fsanitize=address,undefined", "-fno-sanitize-recover=all",
                    f"-I{RUNTIME}", str(d / "driver.c"), str(RUNTIME / "es_preprocess.c"),
                    "-o", str(exe)], check=True, capture_output=True, text=True)
    return exe


def _run_c(driver: Path, frame: np.ndarray, spec: dict, tmp: Path) -> np.ndarray:
    h, w = frame.shape[:2]
    (tmp / "frame.raw").write_bytes(np.ascontiguousarray(frame).tobytes())
    mean = spec.get("mean") or [0.0]
    std = spec.get("std") or [1.0]
    mean = mean * 3 if len(mean) == 1 else mean
    std = std * 3 if len(std) == 1 else std
    code, dtype = DTYPES[spec.get("dtype", "float32")]
    args = [str(driver), str(tmp / "frame.raw"), str(h), str(w),
            *[str(v) for v in (spec.get("resize") or [0, 0])],
            *[str(v) for v in (spec.get("center_crop") or [0, 0])],
            str(int(spec.get("channel_order") == "bgr")), str(int(spec.get("layout") == "nhwc")),
            str(code), *[repr(float(np.float32(v))) for v in mean],
            *[repr(float(np.float32(v))) for v in std], str(tmp / "out.raw")]
    r = subprocess.run(args, capture_output=True, text=True)
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
    shape = preprocess.output_shape(spec, h, w)
    return np.frombuffer((tmp / "out.raw").read_bytes(), dtype).reshape(shape)


@pytest.mark.parametrize("h,w,spec", CASES, ids=[str(i) for i in range(len(CASES))])
def test_c_preprocessing_matches_python_bit_for_bit(driver, tmp_path, h, w, spec):
    rng = np.random.default_rng(h * 1000 + w)
    frame = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
    want = preprocess.apply_one(frame, spec)
    got = _run_c(driver, frame, spec, tmp_path)
    assert got.dtype == want.dtype and got.shape == want.shape
    assert np.array_equal(got.view(np.uint8), want.view(np.uint8))  # bit for bit, floats too


def test_resize_to_the_same_size_is_the_identity():
    frame = np.random.default_rng(1).integers(0, 256, (13, 21, 3), dtype=np.uint8)
    assert np.array_equal(preprocess.resize_u8(frame, 13, 21), frame)


def test_bilinear_resize_stays_within_a_step_of_pillow():
    """The declared rule is Pillow's bilinear (half-pixel centres) in integers: upscaling,
    where Pillow does not antialias, agrees to within two grey levels (Q8 weights are
    floored), and to one level almost everywhere."""
    from PIL import Image

    frame = np.random.default_rng(2).integers(0, 256, (12, 10, 3), dtype=np.uint8)
    ours = preprocess.resize_u8(frame, 30, 25).astype(int)
    pil = np.asarray(Image.fromarray(frame).resize((25, 30), Image.BILINEAR)).astype(int)
    assert np.abs(ours - pil).max() <= 2 and (np.abs(ours - pil) <= 1).mean() > 0.99


def test_a_crop_larger_than_the_frame_is_an_error_code(driver, tmp_path):
    frame = np.zeros((8, 8, 3), np.uint8)
    (tmp_path / "f.raw").write_bytes(frame.tobytes())
    r = subprocess.run([str(driver), str(tmp_path / "f.raw"), "8", "8", "0", "0", "9", "9",
                        "0", "0", "0", "0", "0", "0", "1", "1", "1", str(tmp_path / "o")],
                       capture_output=True, text=True)
    assert r.returncode == 4 and "rc -12" in r.stdout
    with pytest.raises(ValueError, match="larger than"):
        preprocess.apply_one(frame, {"center_crop": [9, 9]})
