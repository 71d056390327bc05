"""The output folder under hostile conditions: mount points, full and read-only disks,
/proc, kills mid-publish, file modes. The faults are real: tmpfs and bind mounts (the
tests mount as root and skip, saying why, where mounting is not permitted), ENOSPC and
EROFS from the kernel, real builds through the real CLI, processes killed for real."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from edgesmith import outdir
from edgesmith.errors import UsageError
from tests.conftest import DIGITS_ARCH, ROOT

EDGESMITH = str(Path(sys.executable).with_name("edgesmith"))


@pytest.fixture
def mount():
    """``mount(*options, target)`` for real; every mount is lazily unmounted at teardown."""
    mounted: list[Path] = []

    def run(*args: str, target: Path) -> Path:
        target.mkdir(parents=True, exist_ok=True)
        r = subprocess.run(["mount", *args, str(target)], capture_output=True, text=True)
        if r.returncode != 0:
            if os.geteuid() != 0:
                pytest.skip(f"mounting needs root here: {r.stderr.strip()}")
            pytest.fail(f"mount {' '.join(args)} {target}: {r.stderr.strip()}")
        mounted.append(target)
        return target

    yield run
    for target in reversed(mounted):
        subprocess.run(["umount", "-l", str(target)], capture_output=True)


def _build(ckpt: Path, out: Path, *extra: str, env: dict | None = None):
    cmd = [EDGESMITH, "build", str(ckpt), "--arch", DIGITS_ARCH, "--out", str(out), *extra]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                          env=env or dict(os.environ))


def _write_build(folder: Path, label: str, names: tuple[str, ...]) -> None:
    """A stand-in build: files whose content says which build they belong to."""
    for name in names:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(label)
    (folder / "manifest.json").write_text(json.dumps({"build": label, "files": list(names)}))


def _whole_build(folder: Path) -> str:
    """The label of the one build ``folder`` holds whole, nothing of another mixed in."""
    manifest = json.loads((folder / "manifest.json").read_text())
    label, names = manifest["build"], manifest["files"]
    for name in names:
        assert (folder / name).read_text() == label, (name, label)
    tops = {Path(n).parts[0] for n in names} | {"manifest.json"}
    visible = {p.name for p in folder.iterdir() if not p.name.startswith(".")} - {"lost+found"}
    assert visible == tops, (visible, tops)
    return label


OLD = ("a.txt", "only_old.txt", "targets/x/model.bin")
NEW = ("a.txt", "only_new.txt", "targets/x/model.bin", "targets/y/model.bin")


# --- item 1: --out on a mount point ----------------------------------------------------------

@pytest.mark.slow
def test_build_publishes_into_a_bind_mount_point(digits_ckpt, tmp_path, mount):
    """A CI volume is a mount point: renaming it fails with EBUSY. The build used to run
    to the end, then print a traceback and publish nothing. A bind mount of a folder from
    the same filesystem is the case os.path.ismount misses."""
    src = tmp_path / "volume"
    src.mkdir()
    out = mount("--bind", str(src), target=tmp_path / "out")
    first = _build(digits_ckpt, out, "-t", "onnx")
    assert first.returncode == 0, first.stderr[-2000:]
    second = _build(digits_ckpt, out, "-t", "onnx:fp32", "--force")
    assert second.returncode == 0, second.stderr[-2000:]
    assert str(out) in Path("/proc/self/mountinfo").read_text()  # still the mount point
    manifest = json.loads((src / "manifest.json").read_text())  # written through the mount
    assert [t["name"] for t in manifest["targets"]] == ["onnx-fp32"]
    assert not (src / "targets" / "onnx-int8").exists()  # the first build's leftovers left
    assert sorted(p.name for p in src.iterdir() if p.name.startswith(".")) == [".edgesmith.lock"]


def test_publish_into_a_tmpfs_volume_with_lost_found(tmp_path, mount):
    out = mount("-t", "tmpfs", "-o", "size=8m", "tmpfs", target=tmp_path / "vol")
    (out / "lost+found").mkdir()  # what a fresh ext4 volume holds: not a reason to refuse
    for label, names in (("old", OLD), ("new", NEW)):
        with outdir.staging(out) as tmp:
            assert tmp.parent == out  # staged on the volume: a rename cannot cross it
            _write_build(tmp, label, names)
            outdir.publish(tmp, out)
        assert _whole_build(out) == label
    assert (out / "lost+found").is_dir()
    assert sorted(p.name for p in out.iterdir() if p.name.startswith(".")) == [".edgesmith.lock"]


# --- item 9: a kill at any moment of a publish ----------------------------------------------

KILLER = textwrap.dedent("""
    import json, os, signal, sys
    from pathlib import Path
    from edgesmith import outdir

    out, cut, how = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    calls = 0

    def die_after(real):
        def step(*args):
            global calls
            result = real(*args)
            calls += 1
            if calls == cut:
                if how == "kill":
                    os._exit(9)  # SIGKILL's effect: nothing more runs
                os.kill(os.getpid(), signal.SIGTERM)  # default action: die, unless deferred
            return result
        return step

    os.replace = die_after(os.replace)
    outdir._exchange = die_after(outdir._exchange)
    names = json.loads(sys.argv[4])
    with outdir.staging(out) as tmp:
        for name in names:
            (tmp / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp / name).write_text("new")
        (tmp / "manifest.json").write_text(json.dumps({"build": "new", "files": names}))
        outdir.publish(tmp, out)
    print("published", calls)
""")


def _publish_cut(out: Path, cut: int, how: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", KILLER, str(out), str(cut), how,
                           json.dumps(NEW)], capture_output=True, text=True, timeout=60,
                          cwd=ROOT)


def _kill_at_every_step(out: Path, how: str) -> list[str]:
    """Publish over an old build, cut after the 1st, 2nd, ... rename until one finishes;
    after each cut a reader's ``recover`` must find one whole build."""
    seen = []
    for cut in range(1, 30):
        for p in out.iterdir():
            if p.name not in ("lost+found",):
                subprocess.run(["rm", "-rf", str(p)], check=True)
        _write_build(out, "old", OLD)
        r = _publish_cut(out, cut, how)
        outdir.recover(out)  # what bench does before reading
        seen.append(_whole_build(out))
        leftovers = [p.name for p in out.iterdir() if p.name.startswith(".edgesmith-")]
        assert leftovers == [], (cut, leftovers)
        if r.returncode == 0:
            assert r.stdout.startswith("published"), r.stderr
            return seen
    pytest.fail("the publish never finished")


def test_kill_at_every_step_of_a_mount_point_publish_leaves_one_whole_build(tmp_path,
                                                                             mount):
    out = mount("-t", "tmpfs", "-o", "size=8m", "tmpfs", target=tmp_path / "vol")
    seen = _kill_at_every_step(out, "kill")
    assert len(seen) >= len(OLD) + len(NEW)  # the swap really was cut at every rename
    assert "old" in seen and seen[-1] == "new"


def test_kill_mid_publish_of_an_ordinary_folder_never_hides_the_build(tmp_path):
    """One renameat2(RENAME_EXCHANGE): no moment at which DIR is missing for a reader."""
    out = tmp_path / "out"
    out.mkdir()
    seen = _kill_at_every_step(out, "kill")
    assert seen == ["new", "new"]  # cut right after the exchange: already the new build
    assert sorted(p.name for p in tmp_path.iterdir()) == [".out.lock", "out"]


def test_sigterm_during_a_publish_waits_for_the_publish_to_finish(tmp_path, mount):
    """SIGTERM's default action kills at once; between two renames that would leave the
    folder half-swapped. The publish holds it until the last rename."""
    out = mount("-t", "tmpfs", "-o", "size=8m", "tmpfs", target=tmp_path / "vol")
    _write_build(out, "old", OLD)
    r = _publish_cut(out, 2, "term")
    assert r.returncode == -signal.SIGTERM, r.stderr
    assert _whole_build(out) == "new"


@pytest.mark.slow
def test_bench_after_a_publish_cut_short_finds_the_previous_build(digits_ckpt, tmp_path,
                                                                  mount):
    """A kill mid-publish used to leave `bench` saying "not a build folder" until the next
    build; bench now puts the folder right first (``outdir.recover``)."""
    src = tmp_path / "volume"
    src.mkdir()
    out = mount("--bind", str(src), target=tmp_path / "out")
    r = _build(digits_ckpt, out, "-t", "onnx:fp32")
    assert r.returncode == 0, r.stderr[-2000:]
    cut = _publish_cut(out, 1, "kill")  # killed once manifest.json had left
    assert cut.returncode == 9 and not (out / "manifest.json").exists(), cut.stderr
    b = subprocess.run([EDGESMITH, "bench", str(out), "--local", "--runs", "2", "--warmup",
                        "0", "--json"], capture_output=True, text=True, timeout=300)
    assert b.returncode == 0, b.stderr[-2000:]
    assert json.loads((out / "manifest.json").read_text())["targets"][0]["name"] == "onnx-fp32"


def test_recover_leaves_no_lock_file_where_no_build_ever_ran(tmp_path):
    outdir.recover(tmp_path / "typo")
    assert list(tmp_path.iterdir()) == []


# --- item 4: unwritable, full, read-only ------------------------------------------------------

def test_full_disk_is_refused_before_any_work(digits_ckpt, tmp_path, mount):
    """ENOSPC used to surface minutes in, as bogus conversion failures. A disk with half a
    megabyte left (the build writes about one) is refused after loading, before export."""
    disk = mount("-t", "tmpfs", "-o", "size=8m", "tmpfs", target=tmp_path / "disk")
    with (disk / "filler").open("wb") as f:
        f.write(b"\0" * (8 * 1024 - 512) * 1024)
    r = _build(digits_ckpt, disk / "out", "-t", "onnx")
    assert r.returncode == 2, r.stderr[-2000:]
    assert "MiB free" in r.stderr and str(disk / "out") in r.stderr
    assert "Traceback" not in r.stderr
    assert "export" not in r.stderr  # refused before the first stage after loading
    assert sorted(p.name for p in disk.iterdir()) == [".out.lock", "filler"]


@pytest.mark.slow
@pytest.mark.parametrize("when", ["quantize", "target"])
def test_disk_filling_up_mid_build_stops_it_with_one_message(digits_ckpt, tmp_path, mount,
                                                             when):
    """ENOSPC used to surface as a conversion failure per target (exit 4), then a
    traceback at publish. The disk is filled for real when a stage starts: at "quantize"
    onnx's C++ shape inference cuts a file short without an error, and the failure reads
    as a corrupt model; at "target" the converter's own write fails with ENOSPC."""
    from edgesmith.pipeline import build
    from edgesmith.pipeline.events import Events

    disk = mount("-t", "tmpfs", "-o", "size=48m", "tmpfs", target=tmp_path / "disk")
    out = disk / "out"
    req = build.BuildRequest(model=str(digits_ckpt), arch=DIGITS_ARCH, data="digits",
                             profile="host", out=out, targets=["onnx"], use_cache=False)
    build.run(req)
    before = (out / "manifest.json").read_bytes()

    class FillsTheDisk(Events):
        def stage(self, name, detail=""):
            if name.startswith(when) and not (disk / "filler").exists():
                _fill(disk / "filler")
            return super().stage(name, detail)

    with pytest.raises(UsageError) as e:
        build.run(req, FillsTheDisk())
    assert e.value.exit_code == 2
    assert "No space left on device" in e.value.message()
    assert "the build stopped" in e.value.message() and "target(s) failed" not in e.value.what
    (disk / "filler").unlink()
    assert (out / "manifest.json").read_bytes() == before  # the previous build, untouched
    assert sorted(p.name for p in disk.iterdir()) == [".out.lock", "out"]


def _fill(path: Path) -> None:
    """Write until the kernel says ENOSPC, down to the last page."""
    with path.open("wb", buffering=0) as f:
        for chunk in (1 << 20, 4096):
            try:
                while True:
                    f.write(b"\0" * chunk)
            except OSError:
                pass


def test_read_only_parent_is_refused_with_the_path(digits_ckpt, tmp_path, mount):
    """Root ignores mode bits, so a read-only mount is the honest read-only parent."""
    ro = mount("-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", target=tmp_path / "ro")
    r = _build(digits_ckpt, ro / "out", "-t", "onnx")
    assert r.returncode == 2, r.stderr[-2000:]
    assert "Read-only file system" in r.stderr and str(ro / "out") in r.stderr
    assert "mounted read-only" in r.stderr
    assert "Traceback" not in r.stderr


def test_out_under_proc_is_refused_with_the_path(digits_ckpt):
    r = _build(digits_ckpt, Path("/proc/edgesmith-out"), "-t", "onnx")
    assert r.returncode == 2, r.stderr[-2000:]
    assert "/proc/edgesmith-out" in r.stderr and "Traceback" not in r.stderr


def test_out_through_a_file_says_which_part_is_a_file(tmp_path):
    (tmp_path / "model.pt").write_text("")
    with pytest.raises(UsageError) as e:
        with outdir.staging(tmp_path / "model.pt" / "out"):
            pass
    assert e.value.where == str(tmp_path / "model.pt" / "out")
    assert str(tmp_path / "model.pt") in e.value.what and "is a file" in (e.value.fix or "")


def test_publish_failing_for_want_of_inodes_names_the_path(tmp_path, mount):
    """A remount read-only is refused while our lock file is open, so the volume runs out
    of inodes instead: a real ENOSPC at the first step of the swap, which needs one."""
    out = mount("-t", "tmpfs", "-o", "size=8m,nr_inodes=64", "tmpfs", target=tmp_path / "vol")
    _write_build(out, "old", OLD)
    with outdir.staging(out) as tmp:
        _write_build(tmp, "new", NEW)
        _use_up_inodes(tmp / "filler")
        with pytest.raises(UsageError) as e:
            outdir.publish(tmp, out)
    assert e.value.exit_code == 2 and e.value.where == str(out)
    assert "publishing failed" in e.value.what and "No space left on device" in e.value.what
    assert "previous build is untouched" in (e.value.fix or "")
    assert _whole_build(out) == "old"


def _use_up_inodes(folder: Path) -> None:
    folder.mkdir()
    try:
        for i in range(10_000):
            (folder / str(i)).touch()
    except OSError:
        return
    pytest.fail("the tmpfs never ran out of inodes")


# --- item 11: file modes ------------------------------------------------------------------

@pytest.mark.slow
def test_qat_model_is_written_readable_like_every_other_output(digits_ckpt, tmp_path):
    """model_qdq.onnx went out 0600 (mkstemp's mode kept by torch's export) while every
    other output is 0666 & ~umask: another user's bench job could not read it."""
    import torch

    from edgesmith.artifact import write_json_atomic
    from edgesmith.compress.calibration import from_splits
    from edgesmith.compress.qat import export_qdq, quantize
    from edgesmith.pipeline.data import digits
    from edgesmith.pipeline.model import load
    from edgesmith.profiles.schema import Calibration

    model = load(str(digits_ckpt), arch=DIGITS_ARCH).torch_model
    splits = digits(0)
    qmodel = quantize(model, from_splits(splits, Calibration(samples=32)))
    before = os.umask(0o022)
    try:
        path = export_qdq(qmodel, torch.as_tensor(splits.val_x[:1]), tmp_path / "model_qdq.onnx")
        write_json_atomic(tmp_path / "manifest.json", {})
    finally:
        os.umask(before)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert stat.S_IMODE((tmp_path / "manifest.json").stat().st_mode) == 0o644
