"""Issue 8's hostile inputs for `edgesmith bench`: a host name or a build manifest that tries
to run a command or to write outside the work dir is refused before anything runs; names
that are merely odd are quoted all the way to the (real) device."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from edgesmith.devices.bench import Device, bench, load_build
from edgesmith.errors import DeviceError, UsageError


@pytest.mark.parametrize("host", ["127.0.0.1;touch {canary}", "$(touch {canary})",
                                  "`touch {canary}`", "127.0.0.1 -oProxyCommand=touch {canary}",
                                  "a|touch {canary}", "-oProxyCommand=touch {canary}"])
def test_host_with_shell_metacharacters_is_refused_before_connecting(sshd, demo_build,
                                                                     tmp_path, host):
    canary = tmp_path / "pwned"
    run = bench(demo_build, [Device("evil", ssh=sshd.ssh(host=host.format(canary=canary)))],
                runs=1, warmup=0, connect_attempts=1)
    d = run.devices["evil"]
    assert d["status"] == "error" and d["error"]["type"] == "DeviceError"
    assert "is not a host name" in d["error"]["what"]
    assert not canary.exists()
    with pytest.raises(DeviceError) as e:
        run.raise_for_status()
    assert e.value.exit_code == 5


def test_user_with_shell_metacharacters_is_refused(sshd, demo_build, tmp_path):
    run = bench(demo_build, [Device("u", ssh=sshd.ssh(user=f"root;touch {tmp_path}/x"))],
                runs=1, warmup=0, connect_attempts=1)
    assert "not a plain user name" in run.devices["u"]["error"]["what"]
    assert not (tmp_path / "x").exists()


def _edit_manifest(build: Path, edit) -> None:
    path = build / "manifest.json"
    manifest = json.loads(path.read_text())
    edit(manifest)
    path.write_text(json.dumps(manifest))


def _target(manifest, name):
    return next(t for t in manifest["targets"] if t["name"] == name)


HOSTILE = {
    "target name climbs out": lambda m: _target(m, "onnx-fp32").update(name="../../etc"),
    "target name runs a command": lambda m: _target(m, "onnx-fp32").update(name="x;$(id)"),
    "absolute target path": lambda m: _target(m, "onnx-fp32").update(path="/etc/passwd"),
    "target path with ..": lambda m: _target(m, "onnx-fp32").update(
        path="targets/../../../etc/passwd"),
    "file list with ..": lambda m: _target(m, "c-fp32")["bench"]["files"].append(
        "../../manifest.json"),
    "absolute file": lambda m: _target(m, "c-fp32")["bench"]["files"].append("/etc/hostname"),
    "home-relative file": lambda m: _target(m, "c-fp32")["bench"]["files"].append("~/.ssh/id"),
    "weights outside": lambda m: _target(m, "c-fp32")["bench"].update(weights="../x.bin"),
    "bench input outside": lambda m: m["bench_data"].update(input="/etc/passwd"),
    "unknown format": lambda m: _target(m, "onnx-fp32")["bench"].update(format="sh"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_manifest_is_refused_before_upload(demo_build, case):
    _edit_manifest(demo_build, HOSTILE[case])
    with pytest.raises(UsageError) as e:
        load_build(demo_build)
    assert e.value.exit_code == 2 and "manifest.json" in e.value.where


def test_symlink_out_of_the_build_is_refused(demo_build, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("not for the device")
    os.symlink(secret, demo_build / "targets" / "c-fp32" / "leak.txt")
    _edit_manifest(demo_build, lambda m: _target(m, "c-fp32")["bench"]["files"].append(
        "leak.txt"))
    with pytest.raises(UsageError, match="outside the build folder"):
        load_build(demo_build)


@pytest.mark.slow
def test_odd_file_names_inside_the_build_are_quoted_on_the_device(sshd, demo_build):
    # no '/' in a file name: a relative `touch` would land in the remote command's cwd,
    # the run dir, which --keep leaves for inspection
    odd = "m;touch pwned1;$(touch pwned2)`touch pwned3` '\"&.onnx"
    folder = demo_build / "targets" / "onnx-fp32"
    shutil.move(folder / "model.onnx", folder / odd)

    def edit(m):
        t = _target(m, "onnx-fp32")
        t["path"] = f"targets/onnx-fp32/{odd}"
        t["bench"]["files"] = [odd]
        m["targets"] = [t]

    _edit_manifest(demo_build, edit)
    run = bench(demo_build, [Device("odd", ssh=sshd.ssh())], runs=2, warmup=0, keep=True)
    run.raise_for_status()
    assert [t["status"] for t in run.devices["odd"]["targets"]] == ["ok"]
    kept = Path(run.devices["odd"]["workdir"])
    assert (kept / "targets" / "onnx-fp32" / odd).is_file()
    assert not list(kept.rglob("pwned*")) and not list(Path.home().glob("pwned*"))
    assert not list(Path.cwd().glob("pwned*"))
