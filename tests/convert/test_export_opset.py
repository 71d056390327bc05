"""The export's opset (issue 15, item 4d).

A model using ``affine_grid`` failed at opset 17 while the exporter itself said opset 20
would work. Without ``--opset`` the export now retries at the opset the exporter names; a
given ``--opset`` is kept (the user's runtime may stop there) and the error names the one
the op needs. build, convert and inspect take ``--opset``; the manifest records the opset
the ONNX was written at.
"""

from __future__ import annotations

import json
import textwrap

import numpy as np
import pytest
import torch
from torch import nn
from torch.nn import functional as F

from edgesmith.convert import export
from edgesmith.errors import ConversionError, UsageError
from tests.convert._formats import onnx_run

STN_SOURCE = textwrap.dedent('''
    import torch
    from torch import nn
    from torch.nn import functional as F


    class STN(nn.Module):
        """A spatial transformer: affine_grid (ONNX AffineGrid, opset 20) + grid_sample."""

        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.loc = nn.Linear(64, 6)
            self.head = nn.Linear(64, 10)
            with torch.no_grad():
                self.loc.weight.mul_(0.1)
                self.loc.bias.copy_(torch.tensor([1.0, 0, 0, 0, 1, 0]))

        def forward(self, x):
            theta = self.loc(x.flatten(1)).view(-1, 2, 3)
            grid = F.affine_grid(theta, list(x.shape), align_corners=False)
            return self.head(F.grid_sample(x, grid, align_corners=False).flatten(1))


    def build():
        return STN()
''')


class _STN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.loc = nn.Linear(3 * 8 * 8, 6)
        with torch.no_grad():
            self.loc.weight.mul_(0.1)
            self.loc.bias.copy_(torch.tensor([1.0, 0, 0, 0, 1, 0]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        theta = self.loc(x.flatten(1)).view(-1, 2, 3)
        grid = F.affine_grid(theta, list(x.shape), align_corners=False)
        return F.grid_sample(x, grid, align_corners=False)


@pytest.fixture
def stn_file(tmp_path):
    path = tmp_path / "stn.py"
    path.write_text(STN_SOURCE)
    return f"{path}:build"


def test_an_op_newer_than_opset_17_is_exported_at_the_opset_the_exporter_names(tmp_path):
    model = _STN().eval()
    path = export.export_onnx(model, (1, 3, 8, 8), tmp_path / "stn.onnx")
    assert export.exported_opset(path) == 20
    x = np.random.default_rng(0).standard_normal((4, 3, 8, 8)).astype(np.float32)
    with torch.no_grad():
        ref = model(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(onnx_run(path, x), ref, rtol=1e-4, atol=1e-5)


def test_a_given_opset_is_kept_and_the_error_names_the_one_the_op_needs(tmp_path):
    with pytest.raises(ConversionError, match="affine_grid") as e:
        export.export_onnx(_STN(), (1, 3, 8, 8), tmp_path / "stn.onnx", opset=17)
    assert "--opset 20" in e.value.fix
    assert not (tmp_path / "stn.onnx").exists()


def test_a_model_without_new_ops_stays_at_opset_17(tmp_path):
    path = export.export_onnx(nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU()), (1, 3, 8, 8),
                              tmp_path / "m.onnx")
    assert export.exported_opset(path) == export.DEFAULT_OPSET == 17


@pytest.mark.parametrize("opset", [11, 16, 99])
def test_an_opset_outside_what_the_exporter_writes_is_a_usage_error(opset):
    with pytest.raises(UsageError, match=f"--opset {opset} is outside 17..20"):
        export.check_opset(opset)


def test_build_records_the_opset_the_exporter_named(cli, stn_file, tmp_path):
    out = tmp_path / "out"
    r = cli("build", stn_file, "--data", "digits", "--target", "onnx:fp32", "--out", out)
    assert r.code == 0, r.out + r.err
    assert "export: opset 20" in r.err
    stage = json.loads((out / "manifest.json").read_text())["stages"]["export"]
    assert stage["opset"] == 20 and stage["opset_requested"] is None


def test_build_with_opset_17_exits_4_naming_the_opset_the_op_needs(cli, stn_file, tmp_path):
    r = cli("build", stn_file, "--data", "digits", "--target", "onnx:fp32", "--opset", "17",
            "--out", tmp_path / "out")
    assert r.code == 4
    assert "affine_grid" in r.err and "--opset 20" in r.err and "Traceback" not in r.err
    assert not (tmp_path / "out").exists()


def test_convert_and_inspect_refuse_an_opset_out_of_range(cli, stn_file, tmp_path):
    for cmd in (("convert", stn_file, "--out", tmp_path / "out"), ("inspect", stn_file)):
        r = cli(*cmd, "--opset", "99")
        assert r.code == 2 and "--opset 99 is outside 17..20" in r.err, r.err


def test_opset_for_an_onnx_model_is_refused_not_ignored(cli, tmp_path):
    onnx_path = export.export_onnx(nn.Sequential(nn.Flatten(), nn.Linear(64, 10)),
                                   (1, 1, 8, 8), tmp_path / "m.onnx")
    for cmd in (("convert", onnx_path, "--data", "digits", "--out", tmp_path / "out"),
                ("inspect", onnx_path)):
        r = cli(*cmd, "--opset", "18")
        assert r.code == 2 and "keeps its own opset" in r.err, r.err


def test_inspect_says_which_opset_it_exported_at(cli, stn_file):
    r = cli("inspect", stn_file, "--opset", "20")
    assert r.code == 0, r.err
    assert "at opset 20" in r.out
