"""Conv + residual Add fusion for int8 (lower/fuse_int8.py, es_conv2d_i8_dot_add): the
fused epilogue gives the bytes of the conv step followed by the Add step, on random
geometries (C check against the reference conv + es_add_i8_ref) and on whole
MobileNetV2-style and ResNet-style blocks (the VNNI build with fusion against the same
build with ES_NO_FUSE and against the reference kernels); the skip tensor stays planned
until the fused step; unmatched patterns keep the two steps."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

RT = Path(__file__).parents[2] / "targets" / "runtime"
CHECK = Path(__file__).parent / "c" / "conv_add_check.c"
VNNI = ["-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512vnni"]


def _cpu_has(flag: str) -> bool:
    try:
        return flag in Path("/proc/cpuinfo").read_text().split()
    except OSError:
        return False


needs_vnni = pytest.mark.skipif(not _cpu_has("avx512_vnni"), reason="this CPU has no VNNI")


def _out(size: int, pad: int, k: int, s: int, d: int) -> int:
    return (size + 2 * pad - d * (k - 1) - 1) // s + 1


def _cases(n: int, seed: int):
    """1x1 convs (the MobileNetV2 projection) on planes over one 256-pixel chunk, 3x3 and
    5x5 convs with padding, stride 2 (the im2col walk) and odd sizes"""
    yield [24, 28, 28, 24, 1, 1, 1, 1, 0, 0, 1, 1, -5, 7, 28, 28]
    yield [64, 17, 19, 64, 3, 3, 1, 1, 1, 1, 1, 1, 3, 8, 17, 19]
    yield [13, 33, 21, 19, 3, 3, 2, 2, 1, 1, 1, 1, 9, 9, 17, 11]
    rng = np.random.default_rng(seed)
    for i in range(n):
        k = int(rng.choice([1, 3, 5]))
        s, d = (1, 1) if k == 1 else (int(rng.integers(1, 3)), int(rng.integers(1, 3)))
        pad = 0 if k == 1 else int(rng.integers(0, k // 2 + 1))
        h, w = int(rng.integers(d * (k - 1) + 1, 40)), int(rng.integers(d * (k - 1) + 1, 60))
        c, m = int(rng.integers(1, 40)), int(rng.integers(1, 40))
        yield [c, h, w, m, k, k, s, s, pad, pad, d, d, int(rng.integers(-128, 128)), i + 20,
               _out(h, pad, k, s, d), _out(w, pad, k, s, d)]


@pytest.mark.parametrize(("name", "flags"), [
    ("portable", ["-O2"]), ("asan", ["-O1", "-g", "-fsanitize=address,undefined",
                                     "-fno-sanitize-recover"]),
    pytest.param("avx512vnni", ["-O3", *VNNI], marks=needs_vnni),
    pytest.param("avx512vnni_asan", ["-O1", "-g", "-fsanitize=address,undefined",
                                     "-fno-sanitize-recover", *VNNI], marks=needs_vnni)])
def test_fused_conv_add_equals_conv_then_add_bit_for_bit(name, flags, tmp_path):
    b = tmp_path / f"conv_add_{name}"
    subprocess.run(["cc", *flags, "-std=c99", "-Wall", "-Wextra", "-Werror", f"-I{RT}",
                    str(CHECK), str(RT / "kernels/conv_int8.c"),
                    str(RT / "kernels/conv_int8_dot.c"), str(RT / "kernels/add_int8.c"),
                    "-lm", "-o", str(b)], check=True)
    env = {"ASAN_OPTIONS": "detect_leaks=0", "PATH": "/usr/bin:/bin"}
    for args in _cases(30, seed=4):
        p = subprocess.run([str(b), *map(str, args)], capture_output=True, text=True,
                           timeout=60, env=env)
        assert p.returncode == 0, f"{name} {args}: {p.stdout}{p.stderr}"


def _block_qdq(path: Path, kind: str) -> Path:
    """A residual block quantized by onnxruntime's static QDQ quantizer on random data:
    'mnv2' an inverted residual (1x1 expand 16->48, ReLU6, depthwise 3x3, 1x1 project
    48->16, + the block input) on 16x19x23, or 'resnet' a basic block (3x3 20->20, ReLU,
    3x3 20->20, the block input + it, ReLU) on 20x21x17, each after a stem conv."""
    import torch

    from tests.targets._helpers import _qdq, export

    nn = torch.nn

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            c = 16 if kind == "mnv2" else 20
            self.stem = nn.Sequential(nn.Conv2d(3, c, 3, 1, 1), nn.ReLU())
            if kind == "mnv2":
                self.body = nn.Sequential(nn.Conv2d(c, 48, 1), nn.ReLU6(),
                                          nn.Conv2d(48, 48, 3, 1, 1, groups=48), nn.ReLU6(),
                                          nn.Conv2d(48, c, 1))
            else:
                self.body = nn.Sequential(nn.Conv2d(c, c, 3, 1, 1), nn.ReLU(),
                                          nn.Conv2d(c, c, 3, 1, 1))

        def forward(self, x):
            h = self.stem(x)
            if kind == "mnv2":
                return self.body(h) + h  # the conv's output is the Add's first input
            return torch.relu(h + self.body(h))  # its second: the fused add swaps them

    torch.manual_seed(1)
    shape = (3, 19, 23) if kind == "mnv2" else (3, 21, 17)
    x = np.random.default_rng(0).standard_normal((32, *shape)).astype(np.float32)
    fp32 = export(Block().eval(), torch.from_numpy(x[:1]), path.with_suffix(".fp32.onnx"))
    return _qdq(fp32, x, path)


@needs_vnni
@pytest.mark.parametrize("kind", ["mnv2", "resnet"])
def test_residual_block_fuses_and_matches_unfused_and_reference_bit_for_bit(
        kind, tmp_path, monkeypatch):
    from edgesmith.targets import codegen, run
    from edgesmith.targets.ir import lower
    from edgesmith.targets.isa import VNNI as ISA_VNNI
    from edgesmith.targets.planner import lifetimes, plan

    src = _block_qdq(tmp_path / f"{kind}.onnx", kind)
    g = lower(src, "int8", ISA_VNNI)
    fns = [c.fn for st in g.steps for c in st.calls]
    assert fns.count("es_conv2d_i8_dot_add") == 1 and "es_add_i8" not in fns, fns
    fused = next(i for i, st in enumerate(g.steps) if st.calls[0].fn == "es_conv2d_i8_dot_add")
    skip = g.steps[fused].inputs[-1]
    first, last = lifetimes(g)
    assert last[skip] == fused and first[skip] < fused  # planned live up to the fused step
    p = plan(g)
    y = g.steps[fused].outputs[0]
    assert p.offsets[y] != p.offsets[skip]  # never written over the skip it reads

    ref = lower(src, "int8", kernels="reference")
    codegen.generate(ref, plan(ref), tmp_path / "ref")
    run.build(tmp_path / "ref")
    flags = "-O3 " + " ".join(VNNI)
    new = codegen.from_onnx(src, tmp_path / "fused", precision="int8", cflags=flags).out_dir
    monkeypatch.setenv("ES_NO_FUSE", "1")
    old = codegen.from_onnx(src, tmp_path / "unfused", precision="int8", cflags=flags).out_dir
    assert "es_conv2d_i8_dot_add" not in (old / "model.c").read_text()
    assert "es_conv2d_i8_dot_add" in (new / "model.c").read_text()
    x = np.random.default_rng(2).standard_normal((4, *g.tensors[g.inputs[0]].shape[1:])) \
        .astype(np.float32)
    want = run.run(tmp_path / "ref", x)
    assert np.array_equal(run.run(old, x), want)
    assert np.array_equal(run.run(new, x), want)


def test_pattern_that_does_not_match_keeps_the_add_step(tmp_path):
    """Portable kernels (no VNNI: the conv is es_conv2d_i8_gemm, whose epilogue has no add)
    keep the conv and the Add as two steps."""
    from edgesmith.targets.ir import lower

    fns = [c.fn for st in lower(_block_qdq(tmp_path / "r.onnx", "resnet"), "int8").steps
           for c in st.calls]
    assert "es_add_i8" in fns and "es_conv2d_i8_dot_add" not in fns
