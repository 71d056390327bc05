"""C option ``input: float_in_place`` (targets/int8_input.py): an int8 build quantizes its
float input over the input's own arena slot. The planner's shrinking buffer never lets two
live buffers share a byte at any step (random interval sets, checked step by step), the
arena drops by the int8 copy where the first step is the peak, the model gives the
default build's output bit for bit, and the runtime keeps the contract a consumed input
needs: a second run on the same copy is refused (ES_ERR_INPUT_SPENT) until the input is
copied in again; a bound input runs any number of times and stays untouched."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edgesmith.errors import UsageError
from edgesmith.pipeline.inspect import inspect
from edgesmith.pipeline.stages import check_budgets
from edgesmith.profiles.schema import Budgets
from edgesmith.targets import codegen, run
from edgesmith.targets.planner import Interval, check, lower_bound, place
from tests.targets._helpers import c_int8_result, model_sources
from tests.targets._tiling_nets import quantized_pair
from tests.targets.test_tiling import _chain_model

H, W = 63, 61
ES_OK, ES_MORE, ES_ERR_INPUT_SPENT = 0, 1, -14


def _interval(i: int, s: int, d: int, size: int, keep: int | None) -> Interval:
    if keep is None or d == 0:
        return Interval(f"t{i}", s, s + d, 64 * size)
    return Interval(f"t{i}", s, s + d, 64 * size, keep=64 * min(keep, size), keep_from=s + 1)


intervals = st.lists(
    st.tuples(st.integers(0, 6), st.integers(0, 4), st.integers(1, 16),
              st.one_of(st.none(), st.integers(1, 16))),
    min_size=1, max_size=7,
).map(lambda xs: [_interval(i, *x) for i, x in enumerate(xs)])


@settings(max_examples=200, deadline=None)
@given(intervals)
def test_shrinking_buffers_never_share_a_live_byte(ivs):
    """At every step the byte ranges each live buffer holds then are disjoint, and the
    lower bound is the most bytes live at one step, both counted here step by step."""
    offsets, arena, _ = place(ivs)
    check(ivs, offsets)
    steps = range(max(iv.end for iv in ivs) + 1)
    for step in steps:
        held = sorted((offsets[iv.name], offsets[iv.name] + iv.live_bytes(step))
                      for iv in ivs if iv.live_bytes(step))
        assert all(hi <= lo for (_, hi), (lo, _) in zip(held, held[1:], strict=False))
        assert all(hi <= arena for _, hi in held)
    assert lower_bound(ivs) == max(sum(iv.live_bytes(s) for iv in ivs) for s in steps)
    assert lower_bound(ivs) <= arena


def test_a_shrunk_buffers_tail_is_lent_to_the_next_steps():
    x = Interval("x", 0, 4, 1024, keep=256, keep_from=1)
    y = Interval("y", 1, 3, 768)
    offsets, arena, _ = place([x, y])
    assert (arena, offsets) == (1024, {"x": 0, "y": 256})
    with pytest.raises(Exception, match="share bytes"):
        check([x, y], {"x": 0, "y": 128})


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    d = tmp_path_factory.mktemp("input_in_place")
    _, qdq, rng = quantized_pair(_chain_model(), (3, H, W), d, "chain", 1)
    plain = codegen.from_onnx(qdq, d / "float", precision="int8")
    spent = codegen.from_onnx(qdq, d / "in_place", precision="int8", input="float_in_place")
    return qdq, plain, spent, rng.standard_normal((3, 3, H, W)).astype(np.float32)


def test_the_int8_copy_goes_over_the_float_inputs_slot(builds):
    """The chain's peak is its first step, float input and int8 copy together: in place,
    the bound and the arena are the float input's 12 B a pixel (3 fewer)."""
    _, plain, spent, _ = builds
    f32, i8 = 4 * 3 * H * W, 3 * H * W
    align = -(-i8 // 64) * 64
    assert plain.plan.lower_bound_bytes == plain.plan.arena_bytes >= -(-f32 // 64) * 64 + align
    assert spent.plan.arena_bytes == spent.plan.lower_bound_bytes == \
        plain.plan.lower_bound_bytes - align
    (name,) = spent.plan.consumed
    q = [t for t, off in spent.plan.offsets.items() if "QuantizeLinear" in t][0]
    assert spent.plan.offsets[q] == spent.plan.offsets[name]
    assert "es_input_consumed[] = {1}" in (spent.out_dir / "model.c").read_text()
    assert "#define ES_INPUT0_CONSUMED 1" in (spent.out_dir / "model.h").read_text()
    assert "es_input_consumed[] = {0}" in (plain.out_dir / "model.c").read_text()
    assert "(the first 11584 B from step 1 on)" in (spent.out_dir / "plan.txt").read_text()


@pytest.mark.parametrize("copy", [False, True])
def test_in_place_gives_the_default_builds_output(builds, copy, tmp_path):
    """edgesmith_bench reads bound inputs, or with --copy-input copies each sample in:
    the consumed slot is refilled before every run either way."""
    _, plain, spent, x = builds
    want = run.run(plain.out_dir, x)
    run.build(spent.out_dir)
    (tmp_path / "in.raw").write_bytes(x.astype("<f4").tobytes())
    p = subprocess.run([str(spent.out_dir / "edgesmith_bench"), "--samples", str(len(x)),
                        "--input", str(tmp_path / "in.raw"), "--output",
                        str(tmp_path / "out.raw"), *(["--copy-input"] if copy else [])],
                       capture_output=True, text=True, cwd=spent.out_dir)
    assert p.returncode == 0, p.stderr
    got = np.fromfile(tmp_path / "out.raw", "<f4").reshape(want.shape)
    assert np.array_equal(got, want)


CONTRACT = r"""
#include <stdio.h>
#include <string.h>
#include "model.h"
static unsigned char arena[ES_ARENA_BYTES + ES_ARENA_ALIGN];
static float x[ES_INPUT0_ELEMS] __attribute__((aligned(64))), keep[ES_INPUT0_ELEMS];
static int8_t ref[ES_OUTPUT0_BYTES];
static int same(es_model *m) { return !memcmp(es_output_ptr(m, 0), ref, sizeof ref); }
int main(void) {
    es_model m;
    size_t pad = (ES_ARENA_ALIGN - (uintptr_t)arena % ES_ARENA_ALIGN) % ES_ARENA_ALIGN;
    int i, n, rc, fresh_init, again, sliced = 0, slice_again, bound_twice, bound_same,
        untouched, after_bind;
    if (es_init(&m, arena + pad, ES_ARENA_BYTES, "weights.bin")) return 1;
    for (i = 0; i < (int)ES_INPUT0_ELEMS; ++i) x[i] = keep[i] = (float)((i * 37) % 19) / 7 - 1;
    fresh_init = es_run(&m, NULL);               /* nothing copied in yet */
    if (es_input(&m, 0, x, sizeof x) || es_run(&m, NULL)) return 2;
    memcpy(ref, es_output_ptr(&m, 0), sizeof ref);
    again = es_run(&m, NULL);                    /* the same copy, consumed */
    memcpy(es_input_ptr(&m, 0), x, sizeof x);    /* written through the pointer */
    if (es_run(&m, NULL) || !same(&m)) return 3;
    if (es_input(&m, 0, x, sizeof x)) return 4;  /* a run in slices of one step */
    for (n = 0; (rc = es_run_slice(&m, 1, NULL)) == ES_MORE; ++n) {}
    sliced = rc == ES_OK && n == ES_NUM_STEPS - 1 && same(&m);
    slice_again = es_run_slice(&m, 1, NULL);
    if (es_bind_input(&m, 0, x, sizeof x)) return 5;
    bound_twice = es_run(&m, NULL) | es_run(&m, NULL);
    bound_same = same(&m);
    untouched = !memcmp(x, keep, sizeof x);
    if (es_input(&m, 0, x, sizeof x) || es_run(&m, NULL)) return 6;  /* the binding ends */
    after_bind = es_run(&m, NULL);
    printf("%d %d %d %d %d %d %d %d\n", fresh_init, again, sliced, slice_again, bound_twice,
           bound_same, untouched, after_bind);
    return 0;
}
"""


def test_a_run_consumes_a_copied_input_and_not_a_bound_one(builds, tmp_path):
    _, _, spent, _ = builds
    src = tmp_path / "contract.c"
    src.write_text(CONTRACT)
    exe = tmp_path / "contract"
    # under ASan/UBSan: the quantize writes int8 over the floats it is reading
    subprocess.run(["cc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-O1", "-g",
                    "-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-I",
                    str(spent.out_dir), *model_sources(spent.out_dir), str(src), "-o",
                    str(exe), "-lm"], check=True)
    out = subprocess.run([str(exe)], capture_output=True, text=True, cwd=spent.out_dir)
    assert out.returncode == 0, out.stdout + out.stderr
    assert [int(v) for v in out.stdout.split()] == [
        ES_ERR_INPUT_SPENT, ES_ERR_INPUT_SPENT, 1, ES_ERR_INPUT_SPENT, ES_OK, 1, 1,
        ES_ERR_INPUT_SPENT]


def test_in_place_needs_an_int8_build_with_its_own_input_quantize(builds, tmp_path):
    qdq, *_ = builds
    fp32 = qdq.with_name("chain.onnx")
    with pytest.raises(UsageError) as e:
        codegen.from_onnx(fp32, tmp_path / "f", precision="fp32", input="float_in_place")
    assert e.value.where == "options.input" and "int8 build" in str(e.value)


def test_inspect_estimates_the_arena_the_option_plans(builds, tmp_path):
    """``edgesmith inspect --profile`` on a Cortex-M7 profile with the option: RAM comes
    from the arena the build will plan, the float input's slot shared with its int8 copy."""
    qdq, *_ = builds
    base = Path("profiles/bundled/cortex-m7.yaml").read_text()
    arena = {}
    for opt in ("float", "float_in_place"):
        prof = tmp_path / f"m7-{opt}.yaml"
        prof.write_text(base.replace("      weights: embedded\n",
                                     f"      weights: embedded\n      input: {opt}\n"))
        (est,) = inspect(str(qdq.with_name("chain.onnx")), str(prof))["mcu"]
        arena[opt] = est["mcu_sections"]["arena"]
    assert arena["float"] - arena["float_in_place"] == -(-3 * H * W // 64) * 64


def test_the_default_plan_tells_the_arena_each_input_option_would_plan(builds, tmp_path):
    """An int8 build taking float input (the default) states in plan.txt and plan.json the
    untiled arena under each C option ``input``: the figures the builds with those options
    plan. A build with one of them set, and an fp32 build, state nothing."""
    qdq, plain, spent, _ = builds
    int8 = codegen.from_onnx(qdq, tmp_path / "int8", precision="int8", input="int8")
    want = {"float": plain.plan.arena_bytes, "float_in_place": spent.plan.arena_bytes,
            "int8": int8.plan.arena_bytes}
    assert want["int8"] < want["float_in_place"] < want["float"]
    assert json.loads((plain.out_dir / "plan.json").read_text())["input_arenas"] == want
    text = (plain.out_dir / "plan.txt").read_text()
    assert (f"untiled arena by C option input: float {want['float']} B (the default), "
            f"float_in_place {want['float_in_place']} B (a run consumes the input copied in), "
            f"int8 {want['int8']} B") in text
    fp32 = codegen.from_onnx(qdq.with_name("chain.onnx"), tmp_path / "fp32", precision="fp32")
    for quiet in (spent, int8, fp32):
        assert "input_arenas" not in json.loads((quiet.out_dir / "plan.json").read_text())
        assert "C option input" not in (quiet.out_dir / "plan.txt").read_text()


def test_an_arena_budget_miss_names_what_each_input_option_would_plan(builds, tmp_path):
    """The build's budget check (exit 3) says which input option would fit."""
    _, plain, spent, _ = builds
    r = c_int8_result(tmp_path, plain.plan.figures())
    (miss,) = check_budgets([r], Budgets(arena_kb=spent.plan.arena_bytes / 1024))
    assert r.status == "budget" and f"arena {plain.plan.arena_bytes} B" in miss
    assert f"float_in_place {spent.plan.arena_bytes} B (a run consumes the input" in miss
