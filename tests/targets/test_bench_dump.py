"""``edgesmith_bench --dump F``: the arena after every step, so the first step where a
whole build leaves its reference can be found (benchmarks/int8_agreement.py's
first_divergence reads it).

The dump must hold one arena image per step, the last holding the output that --output
writes, and every quantized tensor read from the image after the step that writes it
must be the value onnxruntime computes there (the digits CNN's int8 build agrees with it
bit for bit on these samples)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks import int8_agreement as agree  # noqa: E402
from edgesmith.targets import codegen, run  # noqa: E402


def _model_h(folder: Path, name: str) -> int:
    return int(re.search(rf"#define {name} (\d+)", (folder / "model.h").read_text()).group(1))


def test_dump_holds_every_step_and_ends_with_the_output(digits_c_int8, digits_splits,
                                                        tmp_path):
    folder = digits_c_int8
    x = np.ascontiguousarray(digits_splits.val_x[:1], "<f4")
    fin, fout, fdump = tmp_path / "in.raw", tmp_path / "out.raw", tmp_path / "steps.raw"
    x.tofile(fin)
    binary = run.build(folder)
    weights = ["--weights", str(folder / "weights.bin"), "--input", str(fin)]
    res = run.run_bench(binary, [*weights, "--dump", str(fdump)], cwd=folder)
    run.run_bench(binary, [*weights, "--output", str(fout), "--runs", "1", "--warmup", "0",
                           "--no-power"], cwd=folder)
    steps, arena = _model_h(folder, "ES_NUM_STEPS"), _model_h(folder, "ES_ARENA_BYTES")
    assert res == {"steps": steps, "arena_bytes": arena}
    images = np.fromfile(fdump, np.uint8).reshape(steps, arena)
    out = fout.read_bytes()
    off = int(re.search(r"es_output_offsets\[[^]]*\] = \{\s*(\d+)",
                        (folder / "model.c").read_text()).group(1))
    assert images[-1, off:off + len(out)].tobytes() == out


def test_every_quantized_tensor_in_the_dump_is_onnxruntimes(digits_c_int8, digits_qdq,
                                                            digits_splits):
    import onnx

    m = onnx.load(str(digits_qdq))
    for s in range(3):
        x = digits_splits.val_x[s:s + 1]
        ints = agree.ort_ints(m, x)
        labels, where, images = agree.c_step_outputs(digits_c_int8, x[0])
        seen = 0
        for q in (n for n in m.graph.node if n.op_type == "QuantizeLinear"):
            t = agree.c_buffer(q.output[0])
            if t not in where:
                continue
            step, off = where[t]
            ref = ints[q.output[0]].reshape(-1)
            assert np.array_equal(images[step, off:off + ref.size], ref), (s, labels[step])
            seen += 1
        assert seen >= 4  # input, the convs, the classifier: the walk found the buffers
        assert agree.first_divergence(m, digits_c_int8, digits_splits.val_x, [s]) == \
            [{"sample": s, "step": None}]


def test_dump_needs_an_input(digits_c_int8):
    p = subprocess.run([str(run.build(digits_c_int8)), "--dump", "x.raw"],
                       capture_output=True, text=True, cwd=digits_c_int8)
    assert p.returncode == 2
    assert "--dump F needs --input" in p.stderr


@pytest.mark.slow
def test_a_step_planted_one_lsb_off_is_named_as_the_first_divergence(digits_qdq,
                                                                     digits_splits,
                                                                     tmp_path):
    """The finder can find: one conv's output zero point moved by 1 in the generated C
    must come out as that conv's step, its values 1 LSB off."""
    import onnx

    m = onnx.load(str(digits_qdq))
    folder = tmp_path / "bent"
    codegen.from_onnx(digits_qdq, folder, precision="int8", cflags=agree.CFLAGS)
    src = (folder / "model.c").read_text()
    block = re.search(r"static const es_conv_params (P_\w+) = \{[^}]*?\.y_zp = (-?\d+)", src)
    name, zp = block.group(1), int(block.group(2))
    bent = src[:block.start()] + block.group(0)[:-len(block.group(2))] + str(zp + 1) + \
        src[block.end():]
    (folder / "model.c").write_text(bent)
    step = next(int(c) for c, body in re.findall(r"case (\d+):([^}]*?)break;", bent, re.S)
                if f"&{name})" in body)
    (found,) = agree.first_divergence(m, folder, digits_splits.val_x, [0])
    assert found["step"] == step and found["max_lsb"] == 1, found
