"""Patch-based execution of the leading conv chain (targets/tiling.py): the tiled C model
gives the untiled one's output (int8 bit for bit, fp32 within 1e-5), through the real
compiler, on a MobileNetV2-style chain at odd sizes with stride 2 and padding."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from edgesmith.errors import UsageError
from edgesmith.targets import codegen, run
from edgesmith.targets.ir import lower
from edgesmith.targets.planner import plan
from edgesmith.targets.tiling import TiledStep, TilingForce
from edgesmith.targets.tiling_search import apply
from tests.targets._tiling_nets import move_bn_statistics, quantized_pair

H, W = 63, 61


def _chain_model():
    """conv3x3 s2 -> dw3x3 -> 1x1 project -> 1x1 expand -> dw3x3 s2 -> 1x1 project, BN and
    ReLU6 folded, then a head the chain does not reach."""
    import torch
    import torch.nn as nn

    torch.manual_seed(0)

    def cbr(i, o, k=3, s=1, g=1):
        return [nn.Conv2d(i, o, k, s, k // 2, groups=g, bias=False), nn.BatchNorm2d(o),
                nn.ReLU6()]

    m = nn.Sequential(*cbr(3, 16, 3, 2), *cbr(16, 16, 3, 1, 16), nn.Conv2d(16, 8, 1),
                      *cbr(8, 24, 1), *cbr(24, 24, 3, 2, 24), nn.Conv2d(24, 12, 1),
                      nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(12, 5)).eval()
    return move_bn_statistics(m)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiling")
    fp32, qdq, rng = quantized_pair(_chain_model(), (3, H, W), d, "chain", 1)
    return d, fp32, qdq, rng.standard_normal((1, 3, H, W)).astype(np.float32)


def _gen(src: Path, out: Path, precision: str, kernels: str, tiling=None):
    if out.exists():
        shutil.rmtree(out)
    g = lower(src, precision, kernels=kernels)
    g, p = apply(g, plan(g), tiling)
    codegen.generate(g, p, out)
    run.build(out)
    return g, p


CASES = [(prec, kern, n, split) for prec in ("int8", "fp32") for kern in ("fast", "reference")
         for n, split in ((2, "/3/Conv"), (3, "/13/Conv"), (4, "/7/Conv"))]


@pytest.mark.parametrize("precision,kernels,patches,split", CASES)
def test_tiled_chain_output_equals_untiled(models, precision, kernels, patches, split):
    d, fp32, qdq, x = models
    src = qdq if precision == "int8" else fp32
    _gen(src, d / "ref", precision, kernels)
    want = run.run(d / "ref", x)
    g, p = _gen(src, d / "tiled", precision, kernels, TilingForce(patches=patches, split=split))
    got = run.run(d / "tiled", x)
    tiled = [st for st in g.steps if isinstance(st, TiledStep)]
    assert len(tiled) == 1 and len(tiled[0].patches) == patches * patches
    assert tiled[0].layers[-1].name == split
    if precision == "int8":
        assert np.array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    assert p.tiling["applied"] and p.tiling["extra_macs"] > 0
    assert "tiling: " in (d / "tiled" / "plan.txt").read_text()


def test_auto_tiling_lowers_the_fp32_arena_and_reports_it(models):
    _, fp32, _, _ = models
    g = lower(fp32, "fp32")
    p0 = plan(g)
    g2, p = apply(g, p0, "auto")
    assert p.arena_bytes < p0.arena_bytes
    t = p.tiling
    assert t["arena_untiled_bytes"] == p0.arena_bytes and t["arena_bytes"] == p.arena_bytes
    assert t["lower_bound_untiled_bytes"] == p0.lower_bound_bytes
    assert p.arena_bytes < p0.lower_bound_bytes  # below the tensor-level bound
    nr, nc = map(int, p.figures()["tiling"]["patches"].split("x"))
    # auto: within 15 % modelled latency, else (this small chain) the fastest weighed
    assert nr * nc >= 2 and (t["latency_model"] <= 1.15 or t["latency_model"] == min(
        c["latency_model"] for c in t["candidates"]))


def test_budget_tiles_only_when_the_untiled_arena_misses_it(models):
    _, fp32, _, _ = models
    g = lower(fp32, "fp32")
    p0 = plan(g)
    assert apply(g, p0, None, budget_bytes=p0.arena_bytes)[1] is p0  # fits: untouched
    g2, p = apply(g, plan(g), None, budget_bytes=p0.arena_bytes - 1)
    assert p.tiling["applied"] and p.arena_bytes <= p0.arena_bytes - 1
    assert p.tiling["chosen_by"] == "budget"


def test_split_outside_the_chain_is_a_usage_error_naming_the_steps(models):
    _, fp32, _, _ = models
    g = lower(fp32, "fp32")
    with pytest.raises(UsageError) as e:
        apply(g, plan(g), TilingForce(patches=2, split="/16/Gemm"))
    assert e.value.where == "options.tiling.split" and "/0/Conv" in str(e.value)
