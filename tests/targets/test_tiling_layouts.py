"""Patch layouts beyond square grids (targets/tiling.py Layout, tiling_search.layouts):
full-width stripes and uneven column cuts give the untiled output bit for bit (int8)
through the real compiler, and the search scores candidates by a latency model
(tiling_cost.py) that charges the 16-column kernels for narrow patch rows, and says which
layout it chose."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from edgesmith.errors import UsageError
from edgesmith.targets import codegen, run
from edgesmith.targets.ir import lower
from edgesmith.targets.isa import macros
from edgesmith.targets.planner import plan
from edgesmith.targets.tiling import Layout, TiledStep, TilingForce, find_segment
from edgesmith.targets.tiling_cost import column_factor, layer_ns
from edgesmith.targets.tiling_search import apply, candidates, finish
from tests.targets._tiling_nets import mbv2_style, quantized_pair

H, W = 45, 39
ADD2 = "/b4/Add"
NATIVE = "-O3 -march=native"


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiling_layouts")
    fp32, qdq, rng = quantized_pair(mbv2_style(), (3, H, W), d, "mb", 5)
    x = rng.standard_normal((1, 3, H, W)).astype(np.float32)
    ref = d / "ref"
    codegen.generate(*apply(*_lowered(qdq), "off"), ref, cflags=NATIVE)
    run.build(ref)
    return d, qdq, x, run.run(ref, x)


def _lowered(src):
    g = lower(src, "int8", macros("cc", NATIVE))  # the stem and 16-column depthwise kernels
    return g, plan(g)


def _build(g, p, out):
    if out.exists():
        shutil.rmtree(out)
    codegen.generate(g, p, out, cflags=NATIVE)
    run.build(out)
    return out


def _searched(src, kind: str):
    """A candidate the search generates whose layout is ``kind``: stripes or uneven."""
    g, p = _lowered(src)
    start, seg, ends = find_segment(g)
    cands = candidates(g, start, seg, ends, 64)
    pick = {"stripes": lambda c: c.layout.shape[1] == 1,
            "uneven": lambda c: "cols cut at" in c.layout.describe()}[kind]
    chosen = [c for c in cands if pick(c) and c.plan.arena_bytes < p.arena_bytes]
    assert chosen, [c.layout.describe() for c in cands]
    c = max(chosen, key=lambda c: (c.layers, c.layout.shape))  # the longest segment
    return (g, p, c, *finish(g, p, c, None, "test", [c]))


@pytest.mark.parametrize("kind", ["stripes", "uneven"])
def test_searched_stripes_and_uneven_cuts_equal_untiled_bit_for_bit(models, kind):
    d, qdq, x, want = models
    _, p0, c, g, p = _searched(qdq, kind)
    got = run.run(_build(g, p, d / kind), x)
    (st,) = [s for s in g.steps if isinstance(s, TiledStep)]
    assert st.layout == c.layout and len(st.patches) == np.prod(c.layout.shape)
    if kind == "stripes":  # every patch row keeps the tensor's whole width
        assert all(pa.win[j][3] - pa.win[j][2] == st.full_hw[j][1]
                   for pa in st.patches for j in range(1, len(st.tensors)))
    else:
        widths = {pa.win[-1][3] - pa.win[-1][2] for pa in st.patches}
        assert len(widths) == 2  # two different column widths
    assert np.array_equal(got, want)
    assert p.arena_bytes < p0.arena_bytes


def test_forced_stripes_equal_untiled_and_plan_says_stripes(models, cli):
    d, qdq, x, want = models
    g, p = apply(*_lowered(qdq), TilingForce(patches=3, cols=1, split=ADD2))
    out = _build(g, p, d / "forced_stripes")
    assert np.array_equal(run.run(out, x), want)
    assert p.tiling["grid"] == [3, 1] and p.tiling["layout"] == "3x1 stripes"
    r = cli("plan", out)
    assert r.code == 0, r.err
    assert "3x1 patches (3x1 stripes) over" in r.out and "modelled latency" in r.out


def test_forced_columns_wider_than_the_split_output_is_a_usage_error(models):
    _, qdq, _, _ = models
    with pytest.raises(UsageError) as e:
        apply(*_lowered(qdq), TilingForce(patches=2, cols=16, split=ADD2))
    assert e.value.where == "options.tiling.patches" and "2x16" in str(e.value)


def test_narrow_rows_cost_the_16_column_kernels_whole_blocks():
    p = {"M": 32, "C": 32, "group": 32, "KH": 3, "KW": 3, "OH": 24, "OW": 26, "H": 26,
         "W": 26, "SH": 1, "SW": 1, "DH": 1, "DW": 1}
    assert column_factor("es_dwconv2d_i8_hwc", p) == pytest.approx(32 / 26)
    assert column_factor("es_dwconv2d_i8_hwc", {**p, "W": 48}) == 1.0
    assert column_factor("es_conv2d_i8_dot", p) == 1.0  # GEMM: columns are not blocked
    # two 26-wide halves of a 48-wide row (the halo: 4 more columns) cost more than
    # the whole row by more than the halo's share: 2 x 2 blocks against 3
    half = layer_ns("es_dwconv2d_i8_hwc", p, 0)
    whole = layer_ns("es_dwconv2d_i8_hwc", {**p, "W": 48, "OW": 48, "H": 24}, 0)
    assert 2 * half > whole * 52 / 48 * 1.2
    # a GEMM's cost follows its MACs
    g1 = layer_ns("es_conv2d_i8_dot", {**p, "group": 1, "KH": 1, "KW": 1}, 0)
    g2 = layer_ns("es_conv2d_i8_dot", {**p, "group": 1, "KH": 1, "KW": 1, "OW": 52}, 0)
    assert g2 > 1.9 * g1


def test_budget_picks_the_fitting_candidate_the_model_deems_fastest_not_fewest_macs(models):
    """At a budget where the fewest extra MACs and the lowest modelled latency are two
    different candidates (here stripes, more MACs on whole rows), the model's wins."""
    _, qdq, _, _ = models
    g, p0 = _lowered(qdq)
    start, seg, ends = find_segment(g)
    cands = [c for c in candidates(g, start, seg, ends, 64)
             if c.plan.arena_bytes < p0.arena_bytes]

    def by_model(fit):
        return min(fit, key=lambda c: (c.latency, c.plan.arena_bytes))

    split = [b for b in sorted({c.plan.arena_bytes for c in cands})
             if by_model(fit := [c for c in cands if c.plan.arena_bytes <= b])
             is not min(fit, key=lambda c: (c.extra_macs, c.plan.arena_bytes))]
    assert split, "no budget where extra MACs and the model disagree"
    budget = split[0]
    best = by_model([c for c in cands if c.plan.arena_bytes <= budget])
    _, pb = apply(g, plan(g), None, budget)
    t = pb.tiling
    assert t["chosen_by"] == "budget" and pb.arena_bytes <= budget
    assert t["latency_model"] == round(best.latency, 4) and t["layout"] == best.layout.describe()
    assert t["split"] == best.step.layers[-1].name


def test_layout_describes_stripes_and_uneven_cuts():
    assert Layout.even(24, 24, 2, 2).describe() == "2x2"
    assert Layout.even(24, 24, 4, 1).describe() == "4x1 stripes"
    assert Layout((0, 12, 24), (0, 14, 24)).describe() == "2x2, cols cut at 14"


def test_a_bad_forced_grid_field_is_exit_2_naming_that_field(cli, tmp_path):
    """``cols: 0`` is reported as the grid's field, not as 'not off or auto'."""
    from tests.conftest import DIGITS_ARCH, ROOT

    prof = tmp_path / "p.yaml"
    prof.write_text("extends: host\ntargets:\n  - {format: c, precision: int8, options: "
                    "{tiling: {patches: 2, cols: 0, split: 0}}}\n")
    r = cli("build", ROOT / "examples" / "digits" / "digits.pt", "--arch", DIGITS_ARCH,
            "--profile", prof, "--out", tmp_path / "o")
    assert r.code == 2, r.out + r.err
    assert "tiling.force.cols" in r.err and "greater than or equal to 1" in r.err
    assert "Traceback" not in r.err
