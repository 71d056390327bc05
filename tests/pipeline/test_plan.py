"""``edgesmith plan``: the C runtime's memory plan of a real build, drawn as text."""

from __future__ import annotations

import json
import re

import pytest

from tests.conftest import DIGITS_ARCH


@pytest.fixture(scope="module")
def c_build(tmp_path_factory, digits_ckpt):
    from edgesmith.pipeline import build

    out = tmp_path_factory.mktemp("plan") / "b"
    build.run(build.BuildRequest(model=str(digits_ckpt), arch=DIGITS_ARCH, data="digits",
                                 profile="host", out=out, targets=["c:int8", "onnx:fp32"]))
    return out


@pytest.mark.slow
def test_plan_of_a_build_draws_every_c_targets_arena(cli, c_build):
    r = cli("plan", c_build)
    assert r.code == 0, r.err
    manifest = json.loads((c_build / "manifest.json").read_text())
    arena = next(t for t in manifest["targets"] if t["name"] == "c-int8")["meta"]["arena_bytes"]
    assert r.out.startswith("c-int8")
    assert f"arena {arena} B" in r.out and "liveness lower bound" in r.out
    rows = [ln for ln in r.out.splitlines() if re.match(r"^\s+\d+  [a-z.]+  ", ln)
            and not ln.endswith("(outputs)")]  # one row per step, then what stays live
    assert len(rows) == next(t for t in manifest["targets"]
                             if t["name"] == "c-int8")["meta"]["steps"]
    assert "onnx-fp32" not in r.out  # only C targets have a plan


@pytest.mark.slow
def test_plan_of_one_c_folder_and_as_json(cli, c_build):
    folder = c_build / "targets" / "c-int8"
    one = cli("plan", folder)
    assert one.code == 0 and one.out.startswith("c-int8") and "memory plan:" in one.out
    r = cli("plan", c_build, "--json")
    doc = json.loads(r.out)
    assert [d["target"] for d in doc] == ["c-int8"] and doc[0]["arena_bytes"] > 0
    assert doc[0]["plan"] == (folder / "plan.txt").read_text()
    # what C option input would plan: plan.json's figure, null where no option saves
    assert doc[0]["input_arenas"] == json.loads((folder / "plan.json").read_text()).get(
        "input_arenas")


def test_plan_of_a_folder_that_is_no_build_says_what_to_pass(cli, tmp_path):
    r = cli("plan", tmp_path)
    assert r.code == 2
    assert "neither a build folder nor a generated C folder" in r.err and "--out" in r.err
