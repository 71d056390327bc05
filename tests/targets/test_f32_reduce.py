"""Global average pooling and ReduceMean / ReduceSum over the last axes (es_reduce_f32's
16-partial-sum path) agree with onnxruntime on planes whose size is not a multiple of 16,
with a large common offset that a badly ordered sum would round away; ReduceMax and
reductions over inner axes keep the plain loop and agree too."""

from __future__ import annotations

import numpy as np


def test_global_pool_and_reductions_match_onnxruntime(tmp_path):
    import torch
    from torch import nn

    from edgesmith.targets import run
    from tests.targets._helpers import export, generate, ort_run

    class Net(nn.Module):
        def forward(self, x):
            g = nn.functional.adaptive_avg_pool2d(x, 1).flatten(1)     # 37 x 41 = 1517 values
            r = x.mean(dim=(2, 3))                                      # ReduceMean, last axes
            s = x.sum(dim=3).flatten(1) / 41.0                          # ReduceSum, 41 values
            m = x.amax(dim=2).flatten(1)                                # ReduceMax, inner axis
            c = x.mean(dim=1).flatten(1)                                # mean over channels
            return torch.cat([g, r, s, m, c], 1)

    torch.manual_seed(3)
    x = torch.randn(1, 5, 37, 41) * 3 + 100
    onnx_path = export(Net().eval(), x, tmp_path / "m.onnx")
    out = generate(onnx_path, tmp_path / "c", precision="fp32")
    np.testing.assert_allclose(run.run(out, x.numpy()), ort_run(onnx_path, x.numpy()),
                               rtol=1e-5, atol=1e-5)
