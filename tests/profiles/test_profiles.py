"""Profiles: bundled ones validate; every kind of mistake names the file and line."""

from __future__ import annotations

import textwrap

import pytest

from edgesmith import profiles
from edgesmith.errors import ProfileError

GOOD = """\
device:
  name: board
  arch: aarch64
  ram_mb: 512
targets:
  - {format: onnx, precision: fp32}
"""


def write(tmp_path, text, name="p.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


@pytest.mark.parametrize("name", profiles.bundled_names())
def test_every_bundled_profile_validates(name):
    p = profiles.load(name)
    assert p.name == name
    assert p.targets


def test_required_bundled_profiles_exist():
    assert {"host", "raspberry-pi-4", "jetson-orin-nano", "intel-nuc", "iphone-15",
            "cortex-m7"} <= set(profiles.bundled_names())


def test_host_profile_lists_every_format():
    formats = {t.format.value for t in profiles.load("host").targets}
    assert formats == {"onnx", "tflite", "openvino", "coreml", "c"}


def test_cortex_m7_embeds_weights_and_budgets_the_arena():
    p = profiles.load("cortex-m7")
    assert p.targets[0].options["weights"] == "embedded"
    assert p.budgets.arena_kb is not None


def test_defaults_are_filled_in(tmp_path):
    p = profiles.load(write(tmp_path, GOOD))
    assert p.name == "p"
    assert p.device.cores == 1
    assert p.compress.calibration.method == "minmax"


@pytest.mark.parametrize("text, line, words", [
    (GOOD.replace("ram_mb: 512", "ram_mb: [512"), 4, "YAML syntax"),
    (GOOD.replace("ram_mb: 512", "ram_mb: lots"), 4, "ram_mb"),
    (GOOD.replace("ram_mb: 512", "ram_mb: 512\n  ram_gb: 1"), 5, "unknown key"),
    (GOOD.replace("  ram_mb: 512\n", ""), 1, "required field is missing"),
    (GOOD.replace("arch: aarch64", "arch: sparc"), 3, "expected one of"),
    (GOOD.replace("precision: fp32", "precision: fp64"), 6, "fp16"),
    (GOOD.replace("ram_mb: 512", "ram_mb: 512\n  ram_mb: 1024"), 5, "appears twice"),
    (GOOD + "budgets:\n  accuracy_drop: -1\n", 8, "accuracy_drop"),
])
def test_bad_profile_names_file_and_line(tmp_path, text, line, words):
    path = write(tmp_path, text)
    with pytest.raises(ProfileError) as err:
        profiles.load(path)
    msg = err.value.message()
    assert f"{path}:{line}" in msg, msg
    assert words in msg, msg


def test_missing_device_points_at_the_top_level(tmp_path):
    path = write(tmp_path, "targets:\n  - {format: c}\n")
    with pytest.raises(ProfileError, match=r"p.yaml:1: device: required field is missing"):
        profiles.load(path)


def test_extends_merges_and_overrides(tmp_path):
    write(tmp_path, GOOD, "base.yaml")
    child = write(tmp_path, """\
        extends: base.yaml
        device:
          ram_mb: 2048
        budgets:
          latency_ms: 3
        """, "child.yaml")
    p = profiles.load(child)
    assert p.name == "child"
    assert p.device.ram_mb == 2048 and p.device.arch == "aarch64"
    assert p.budgets.latency_ms == 3


def test_extends_a_bundled_profile(tmp_path):
    p = profiles.load(write(tmp_path, "extends: raspberry-pi-4\nssh:\n  host: pi-7\n"))
    assert p.device.arch == "aarch64" and p.ssh.host == "pi-7"


def test_error_in_child_points_at_child_line(tmp_path):
    write(tmp_path, GOOD, "base.yaml")
    child = write(tmp_path, "extends: base.yaml\n\ndevice:\n  cores: many\n", "child.yaml")
    with pytest.raises(ProfileError, match=r"child.yaml:4"):
        profiles.load(child)


def test_extends_loop_is_reported(tmp_path):
    write(tmp_path, "extends: b.yaml\n", "a.yaml")
    write(tmp_path, "extends: a.yaml\n", "b.yaml")
    with pytest.raises(ProfileError, match="loop"):
        profiles.load(tmp_path / "a.yaml")


def test_alias_bomb_is_refused_quickly(tmp_path):
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 9):
        prev = f"*a{i - 1}"
        lines.append(f"a{i}: &a{i} [{', '.join([prev] * 10)}]")
    path = write(tmp_path, "\n".join(lines) + "\n")
    with pytest.raises(ProfileError, match="alias"):
        profiles.load(path)


def test_unknown_bundled_name_suggests_close_ones():
    with pytest.raises(ProfileError, match="raspberry-pi-4"):
        profiles.load("raspberry-pi")


def test_profile_cli_list_show_validate(cli, tmp_path):
    r = cli("profiles", "list", "--json")
    assert r.code == 0 and '"cortex-m7"' in r.out
    r = cli("profiles", "show", "host")
    assert r.code == 0 and "arch: x86_64" in r.out
    r = cli("profiles", "validate", write(tmp_path, GOOD))
    assert r.code == 0 and "ok" in r.out


def test_profile_cli_bad_file_exits_2_without_traceback(cli, tmp_path):
    path = write(tmp_path, GOOD.replace("arch: aarch64", "arch: sparc"))
    r = cli("profiles", "validate", path)
    assert r.code == 2
    assert f"{path}:3" in r.err and "Traceback" not in r.err + r.out


def test_unknown_target_option_is_a_profile_error(cli, tmp_path):
    path = write(tmp_path, GOOD.replace("{format: onnx, precision: fp32}",
                                        "{format: onnx, precision: fp32, options: {thread: 2}}"))
    r = cli("profiles", "validate", path)
    assert r.code == 2 and "thread" in r.err and "threads" in r.err


@pytest.mark.parametrize("host", ["-oProxyCommand=touch /tmp/pwned", "pi;reboot", "$(id)",
                                  "pi.local -p 2222"])
def test_an_ssh_host_that_is_not_a_name_is_refused_at_validation(cli, tmp_path, host):
    path = write(tmp_path, GOOD + f"ssh:\n  host: '{host}'\n")
    r = cli("profiles", "validate", path)
    assert r.code == 2, r.out
    assert f"{path}:8" in r.err and "ssh.host" in r.err and "not a host name" in r.err


def test_plain_ssh_hosts_and_users_validate(tmp_path):
    for host in ("pi-7", "board.lan", "10.0.0.7", "[fe80::1%eth0]", "jetson_2"):
        p = profiles.load(write(tmp_path, GOOD + f"ssh:\n  host: '{host}'\n  user: pi\n"))
        assert p.ssh.host == host
