"""fp32 max pooling: the fast kernel (separable: each output row's input rows reduced to one
row, then unchecked taps over the interior columns and checked ones on the border columns;
rows wider than ES_MAXPOOL_ROW take unchecked taps straight from the plane) equals the
reference kernel and onnxruntime (a max only picks one of its inputs) over paddings,
strides, dilations, ceil_mode, planes narrower than the window's reach and a row of 1030,
on all-negative inputs so a padded tap taking part would show."""

from __future__ import annotations

import numpy as np
import pytest

# kernel, stride, padding, dilation, ceil_mode
POOLS = [(3, 2, 1, 1, False), (3, 1, 1, 1, False), (2, 2, 0, 1, True), (5, 3, 2, 1, True),
         (3, 2, 0, 2, False), (3, 1, 0, 1, False), (4, 2, 1, 1, False)]


def _net():
    import torch
    from torch import nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.pools = nn.ModuleList(nn.MaxPool2d(k, s, p, d, ceil_mode=c)
                                       for k, s, p, d, c in POOLS)

        def forward(self, x):
            return torch.cat([pl(x).flatten(1) for pl in self.pools], 1)

    return Net().eval()


@pytest.mark.parametrize("shape", [(1, 3, 17, 23), (1, 2, 9, 5), (1, 1, 6, 1030)])
def test_fast_maxpool_equals_reference_and_onnxruntime(shape, tmp_path):
    import torch

    from edgesmith.targets import codegen, run
    from edgesmith.targets.ir import lower
    from edgesmith.targets.planner import plan
    from tests.targets._helpers import export, ort_run

    torch.manual_seed(4)
    x = -torch.rand(*shape) - 0.5
    onnx_path = export(_net(), x, tmp_path / "m.onnx")
    ref = ort_run(onnx_path, x.numpy())
    for kernels, fn in (("fast", "es_maxpool2d_f32"), ("reference", "es_maxpool2d_f32_ref")):
        g = lower(onnx_path, "fp32", kernels=kernels)
        assert {c.fn for st in g.steps for c in st.calls} >= {fn}
        out = tmp_path / kernels
        codegen.generate(g, plan(g), out, cflags="-O3 -march=native")
        run.build(out)
        np.testing.assert_array_equal(run.run(out, x.numpy()).reshape(ref.shape), ref)
