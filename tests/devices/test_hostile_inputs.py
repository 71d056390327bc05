"""Issue 8's hostile inputs for `edgesmith bench`: a host name or a build manifest that tries
to run a command or to write outside the work dir is refused before anything runs (exit 2:
the user's input, issue 17); names that are merely odd are quoted all the way to the (real)
device."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from edgesmith.devices.bench import Device, bench, load_build
from edgesmith.errors import ProfileError, UsageError
from edgesmith.profiles.schema import Ssh

HOSTILE_HOSTS = ["127.0.0.1;touch {canary}", "$(touch {canary})", "`touch {canary}`",
                 "127.0.0.1 -oProxyCommand=touch {canary}", "a|touch {canary}",
                 "-oProxyCommand=touch {canary}"]


@pytest.mark.parametrize("host", HOSTILE_HOSTS)
def test_host_with_shell_metacharacters_is_an_input_error_before_connecting(
        cli, sshd, demo_build, tmp_path, host):
    canary = tmp_path / "pwned"
    r = cli("bench", demo_build, f"--host={host.format(canary=canary)}", "--port", sshd.port,
            "--identity", sshd.identity, "--known-hosts", sshd.known_hosts)
    assert r.code == 2, r.err
    assert "ssh.host" in r.err and "is not a host name" in r.err and "Host alias" in r.err
    assert "Traceback" not in r.err + r.out
    assert not canary.exists()
    assert not (demo_build / "bench").exists()  # refused before any device work


def test_an_unvalidated_hostile_host_is_still_refused_before_connecting(sshd, demo_build,
                                                                        tmp_path):
    # Python API users can build an Ssh without validation; the bench checks again
    canary = tmp_path / "pwned"
    ssh = Ssh.model_construct(**{**dict(sshd.ssh()), "host": f"-oProxyCommand=touch {canary}"})
    with pytest.raises(ProfileError) as e:
        bench(demo_build, [Device("evil", ssh=ssh)], runs=1, warmup=0, connect_attempts=1)
    assert e.value.exit_code == 2 and e.value.where == "ssh.host"
    assert "device evil" in e.value.what and not canary.exists()


def test_user_with_shell_metacharacters_is_refused(cli, sshd, demo_build, tmp_path):
    r = cli("bench", demo_build, "--host", "127.0.0.1", "--port", sshd.port,
            "--user", f"root;touch {tmp_path}/x", "--identity", sshd.identity)
    assert r.code == 2 and "ssh.user" in r.err and "not a plain user name" in r.err
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
