"""Patch-based execution through inverted-residual blocks (targets/tiling.py): the segment
carries the input's QuantizeLinear and residual Adds (the skip's patch is live until the
Add), and the tiled C model gives the untiled one's output (int8 bit for bit, fp32 within
1e-5) through the real compiler, on a MobileNetV2-style net at odd sizes; the arena the
plan reports is the generated arena."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from edgesmith.targets import codegen, run
from edgesmith.targets.ir import lower
from edgesmith.targets.planner import plan
from edgesmith.targets.tiling import TiledStep, TilingForce
from edgesmith.targets.tiling_search import apply
from tests.targets._helpers import c_int8_result
from tests.targets._tiling_nets import mbv2_style, quantized_pair

H, W = 45, 39
ADD1, ADD2 = "/b3/Add", "/b4/Add"


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiling_res")
    fp32, qdq, rng = quantized_pair(mbv2_style(), (3, H, W), d, "mb", 2)
    return d, {"fp32": fp32, "int8": qdq}, rng.standard_normal((1, 3, H, W)).astype(np.float32)


def _gen(src: Path, out: Path, precision: str, tiling=None, budget=None):
    if out.exists():
        shutil.rmtree(out)
    g = lower(src, precision)
    g, p = apply(g, plan(g), tiling, budget)
    codegen.generate(g, p, out)
    run.build(out)
    return g, p


def _tiled(g) -> TiledStep:
    (st,) = [s for s in g.steps if isinstance(s, TiledStep)]
    return st


@pytest.mark.parametrize("precision,patches,split", [
    ("int8", 2, ADD1), ("int8", 3, ADD2), ("fp32", 2, ADD2), ("fp32", 3, ADD1)])
def test_tiled_segment_through_residual_adds_equals_untiled(models, precision, patches,
                                                            split):
    d, src, x = models
    _gen(src[precision], d / "ref", precision, "off")
    want = run.run(d / "ref", x)
    g, p = _gen(src[precision], d / "tiled", precision, TilingForce(patches=patches, split=split))
    got = run.run(d / "tiled", x)
    st = _tiled(g)
    assert st.layers[-1].name == split and len(st.patches) == patches * patches
    assert any(layer.op == "Add" for layer in st.layers)  # the residual runs in the patch
    assert any(pa.sub[k] for pa in st.patches for k in range(len(st.layers)))  # skip copy
    # int8: the input's quantize is the segment's first step, so no int8 input in the arena
    assert st.quantize_in == (precision == "int8")
    if precision == "int8":
        assert np.array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def test_segment_ends_only_where_nothing_outside_reads_its_tensors(models):
    from edgesmith.targets.tiling import find_segment

    _, src, _ = models
    g = lower(src["int8"], "int8")
    start, seg, ends = find_segment(g)
    names = [seg[k - 1].name for k in ends]
    assert start == 0 and seg[0].op == "QuantizeLinear"
    assert ADD1 in names and ADD2 in names
    # inside a residual block the skip tensor is still read by the Add: no end there
    assert "/b3/conv/conv.6/Conv" not in names and "/b3/conv/conv.3/Conv" not in names


def test_reported_arena_is_the_generated_arena_and_below_the_bound(models):
    d, src, _ = models
    g, p = _gen(src["int8"], d / "auto", "int8", "auto")
    header = (d / "auto" / "model.h").read_text()
    assert f"#define ES_ARENA_BYTES {p.arena_bytes}u" in header
    t = p.tiling
    assert t["arena_bytes"] == p.arena_bytes < t["lower_bound_untiled_bytes"]
    assert t["grid"] == [int(n) for n in t["patches"].split("x")] and t["halo_px"] > 0
    assert t["candidates"] and all(c["arena_bytes"] < t["arena_untiled_bytes"]
                                   for c in t["candidates"])
    text = (d / "auto" / "plan.txt").read_text()
    assert re.search(rf"-> {p.arena_bytes} B tiled", text) and "tiling candidates" in text


def test_budget_picks_the_fitting_candidate_with_the_lowest_modelled_latency(models):
    _, src, _ = models
    g = lower(src["int8"], "int8")
    p0 = plan(g)
    _, p = apply(g, plan(g), "auto")
    budget = (p0.arena_bytes + p.arena_bytes) // 2
    _, pb = apply(g, plan(g), None, budget)
    assert pb.arena_bytes <= budget and pb.tiling["chosen_by"] == "budget"
    fitting = [c for c in pb.tiling["candidates"] if c["arena_bytes"] <= budget]
    assert pb.tiling["latency_model"] == min(c["latency_model"] for c in fitting)


def test_plan_cli_shows_a_tiled_folders_grid_halo_bound_and_extra_macs(models, cli):
    d, src, _ = models
    out = d / "cli"
    if out.exists():
        shutil.rmtree(out)
    g = lower(src["int8"], "int8")
    g, p = apply(g, plan(g), TilingForce(patches=3, split=ADD2))
    codegen.generate(g, p, out)  # plan.txt and plan.json need no compile
    r = cli("plan", out)
    assert r.code == 0, r.err
    t = p.tiling
    assert (f"3x3 patches over {t['layers']} layers" in r.out and f"halo {t['halo_px']} px"
            in r.out and f"{t['arena_bytes']} B tiled" in r.out
            and f"lower bound {t['lower_bound_untiled_bytes']} B" in r.out
            and f"extra MACs {t['extra_macs']}" in r.out)
    (doc,) = json.loads(cli("plan", out, "--json").out)
    assert doc["arena_bytes"] == p.arena_bytes and doc["lower_bound_bytes"] == p.lower_bound_bytes
    assert doc["tiling"]["grid"] == [3, 3] and doc["tiling"]["split"] == ADD2
    assert doc["tiling"]["arena_untiled_bytes"] > doc["arena_bytes"]
    assert doc["tiling"]["extra_macs"] == t["extra_macs"] > 0


def test_budget_even_tiling_cannot_meet_is_a_budget_miss_naming_the_figures(models, tmp_path):
    from edgesmith.pipeline.stages import check_budgets
    from edgesmith.profiles.schema import Budgets

    _, src, _ = models
    g = lower(src["int8"], "int8")
    p0 = plan(g)
    budget = 4096  # below even the float input
    _, p = apply(g, plan(g), None, budget)
    t = p.tiling
    assert t["applied"] and p.arena_bytes > budget  # the smallest arena, still over
    assert p.arena_bytes == min(c["arena_bytes"] for c in t["candidates"])
    r = c_int8_result(tmp_path, p.figures())
    misses = check_budgets([r], Budgets(arena_kb=budget / 1024))
    assert r.status == "budget" and len(misses) == 1
    for figure in (f"arena {p.arena_bytes} B", f"tiled {t['patches']}",
                   f"untiled {p0.arena_bytes} B", f"lower bound {p0.lower_bound_bytes} B"):
        assert figure in misses[0], (figure, misses[0])


def test_native_int8_kernels_tile_through_stem_and_fused_conv_add_bit_for_bit(models):
    """With the kernels -march=native picks (on a VNNI CPU: the stem kernel, the dot GEMM
    and conv + Add fused into es_conv2d_i8_dot_add, whose skip is copied into a buffer of
    its own), the segment still runs from the input's quantize through both blocks."""
    from edgesmith.targets.isa import macros
    from edgesmith.targets.tiling import CONV_ADD, find_segment

    d, src, x = models
    kw = dict(precision="int8", cflags="-O3 -march=native")
    g = lower(src["int8"], "int8", macros("cc", "-O3 -march=native"))
    _, seg, ends = find_segment(g)
    split = [seg[k - 1].name for k in ends if seg[k - 1].name.startswith("/b4/")][-1]
    outs, fused = [], []
    for tag, tiling in (("nref", "off"), ("ntiled", TilingForce(patches=3, split=split))):
        if (d / tag).exists():
            shutil.rmtree(d / tag)
        gen = codegen.from_onnx(src["int8"], d / tag, tiling=tiling, **kw)
        run.build(d / tag)
        outs.append((gen.plan.arena_bytes, run.run(d / tag, x)))
        fused.append(f"{CONV_ADD}(" in (d / tag / "model.c").read_text())
    assert np.array_equal(outs[1][1], outs[0][1]) and outs[1][0] < outs[0][0]
    assert fused[0] == fused[1]  # a fused block stays fused inside the patches
    assert seg[0].op == "QuantizeLinear"
