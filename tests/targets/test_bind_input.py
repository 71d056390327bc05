"""es_bind_input: a generated model reads its input from the caller's buffer, with no copy
into the arena, on real builds through the real compiler. The steps give the same output as
after es_input, never write the buffer (also where the first step works in place), read
whatever it holds at each run, and es_input / es_input_ptr end the binding. Bad calls get
their error codes. edgesmith_bench times runs on bound inputs unless --copy-input."""

from __future__ import annotations

import json
import re
import subprocess

import numpy as np
import pytest

from edgesmith.targets import codegen, run
from edgesmith.targets.ir import lower
from edgesmith.targets.planner import plan
from edgesmith.targets.tiling import TilingForce
from edgesmith.targets.tiling_search import apply
from tests.targets._helpers import compile_harness, model_sources
from tests.targets._tiling_nets import quantized_pair
from tests.targets.test_tiling import _chain_model

ES_OK, ES_ERR_ARG, ES_ERR_SIZE, ES_ERR_UNAVAILABLE = 0, -1, -12, -13
GOOD = {"rc": ES_OK, "same": 1, "again": 1, "untouched": 1, "follows": 1, "input_ends": 1,
        "ptr_ends": 1, "misaligned": ES_ERR_ARG, "short": ES_ERR_SIZE, "index": ES_ERR_ARG,
        "null": ES_ERR_ARG}


def _bind(folder) -> dict:
    h = compile_harness(folder, folder / "harness_bind")
    p = subprocess.run([str(h), "bind"], capture_output=True, text=True, cwd=folder, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    return json.loads(p.stdout)


@pytest.mark.parametrize("build", ["digits_c", "digits_c_int8"])
def test_a_bound_input_is_read_in_place_and_left_untouched(build, request):
    assert _bind(request.getfixturevalue(build)) == GOOD


@pytest.mark.parametrize("kind", ["tiled", "threads"])
def test_a_bound_input_feeds_patches_and_threads(kind, tmp_path):
    """Patch-based execution reads its input window by window (tiling_c.py) and a threaded
    step from worker threads (threads.py): both through the input's buffer name, so both
    read the bound buffer. int8, MobileNetV2-style chain at an odd size."""

    _, qdq, _ = quantized_pair(_chain_model(), (3, 63, 61), tmp_path, "chain", 1)
    out = tmp_path / kind
    if kind == "tiled":
        g = lower(qdq, "int8", kernels="fast")
        g, p = apply(g, plan(g), TilingForce(patches=3, split="/13/Conv"))
        assert any(type(st).__name__ == "TiledStep" for st in g.steps)
        codegen.generate(g, p, out)
    else:
        codegen.from_onnx(qdq, out, precision="int8", threads=2, split_min_macs=1)
        assert "es_parallel_for(" in (out / "model.c").read_text()
    run.build(out)
    flags = ["-O1", "-pthread"] if kind == "threads" else None
    h = compile_harness(out, out / "harness_bind", flags)
    p = subprocess.run([str(h), "bind"], capture_output=True, text=True, cwd=out, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert json.loads(p.stdout) == GOOD


def _export(model, shape, path, output_names=None):
    import torch

    torch.onnx.export(model.eval(), torch.zeros(shape), path, opset_version=17, dynamo=False,
                      input_names=["x"], output_names=output_names)
    return path


def test_a_first_step_in_place_writes_the_arena_not_the_bound_input(tmp_path):
    """(x * 2 - 1) then a conv: the planner puts the elementwise step's output in the
    input's arena slot (in place). Bound, the step reads the caller's buffer and writes the
    slot; the buffer keeps its values (untouched) and the output is es_input's."""
    import torch

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)

        def forward(self, x):
            return self.conv(torch.relu(x * 2.0 - 1.0))

    torch.manual_seed(0)
    src = _export(M(), (1, 3, 10, 12), tmp_path / "inplace.onnx")
    g = lower(src, "fp32")
    assert plan(g).inplace, "the premise: a step works in place on the input's slot"
    out = tmp_path / "c"
    codegen.from_onnx(src, out, precision="fp32")
    run.build(out)
    assert _bind(out) == GOOD


def test_inputs_past_the_bound_pointers_are_copied_and_an_echoed_input_reads_the_buffer(
        tmp_path):
    """Nine inputs: the model object holds ES_MAX_BOUND_INPUTS (8) input pointers, so the
    ninth is not bindable (es_bind_input: ES_ERR_UNAVAILABLE) and is copied in by es_input;
    the other eight are bound. Input 0 is also returned as it is (an output of its own,
    copied by a step), which must then come from the bound buffer."""
    import torch

    class M(torch.nn.Module):
        def forward(self, *xs):
            return xs[0], sum((i + 1) * x for i, x in enumerate(xs))

    names = [f"x{i}" for i in range(9)]
    torch.onnx.export(M().eval(), tuple(torch.zeros(1, 16) for _ in names),
                      tmp_path / "nine.onnx", opset_version=17, dynamo=False,
                      input_names=names, output_names=["echo", "y"])
    out = tmp_path / "c"
    codegen.from_onnx(tmp_path / "nine.onnx", out, precision="fp32")
    run.build(out)
    assert "es_input_bindable[] = {1, 1, 1, 1, 1, 1, 1, 1, 0}" in (out / "model.c").read_text()
    harness = tmp_path / "nine.c"
    harness.write_text(NINE)
    exe = tmp_path / "nine"
    subprocess.run(["cc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-O1", "-I", str(out),
                    *model_sources(out), str(harness), "-o", str(exe),
                    "-lm"], check=True)
    got = subprocess.run([str(exe)], capture_output=True, text=True, cwd=out, check=True)
    want = [float(sum((i + 1) * (j + 10 * i) for i in range(9))) for j in range(16)]
    rc, echo0, echo15, *y = got.stdout.split()
    assert (int(rc), float(echo0), float(echo15)) == (ES_ERR_UNAVAILABLE, 0.0, 15.0)
    assert [float(v) for v in y] == want


NINE = """
#include <stdio.h>
#include "model.h"
static unsigned char arena[ES_ARENA_BYTES + ES_ARENA_ALIGN];
static float x[9][16] __attribute__((aligned(64))), echo[16], y[16];
int main(void) {
    es_model m;
    size_t pad = (ES_ARENA_ALIGN - (uintptr_t)arena % ES_ARENA_ALIGN) % ES_ARENA_ALIGN;
    unsigned char *a = arena + pad;
    int i, j, rc = es_init(&m, a, ES_ARENA_BYTES, "weights.bin"), ninth;
    if (rc) return 1;
    for (i = 0; i < 9; ++i)
        for (j = 0; j < 16; ++j) x[i][j] = (float)(j + 10 * i);
    for (i = 0; i < 8; ++i)
        if (es_bind_input(&m, i, x[i], sizeof x[i]) != ES_OK) return 2;
    ninth = es_bind_input(&m, 8, x[8], sizeof x[8]);
    if (es_input(&m, 8, x[8], sizeof x[8]) || es_run(&m, NULL) ||
        es_output(&m, 0, echo, sizeof echo) || es_output(&m, 1, y, sizeof y))
        return 3;
    printf("%d %g %g", ninth, echo[0], echo[15]);
    for (j = 0; j < 16; ++j) printf(" %g", y[j]);
    printf("\\n");
    return 0;
}
"""


def test_the_bench_times_bound_inputs_unless_told_to_copy(digits_c_int8):
    n = int(re.search(r"#define ES_INPUT0_BYTES (\d+)", (digits_c_int8 / "model.h").read_text())[1])
    x = np.random.default_rng(1).standard_normal(n // 4).astype("<f4")
    (digits_c_int8 / "bind_in.raw").write_bytes(x.tobytes())
    outs = {}
    for flags, mode in (([], "bound"), (["--copy-input"], "copied")):
        o = run.run_bench(digits_c_int8 / "edgesmith_bench",
                          ["--input", "bind_in.raw", "--output", f"bind_{mode}.raw",
                           "--runs", "5", *flags], cwd=digits_c_int8)
        assert o["input"] == mode
        outs[mode] = (digits_c_int8 / f"bind_{mode}.raw").read_bytes()
    assert outs["bound"] == outs["copied"] and len(outs["bound"]) > 0
