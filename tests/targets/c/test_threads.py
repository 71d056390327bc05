"""options: {threads: N}: heavy steps split by output channel over a pool started in
es_init. Outputs equal the single-thread build's exactly (int8 and fp32), sanitizers
(ASan+UBSan, TSan) are clean, nothing is allocated after es_init, hooks still fire once
per step, and a Cortex-M profile refuses threads > 1."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

from edgesmith.targets import run
from tests.targets._helpers import HARNESS, ROOT, compile_harness, generate

pytestmark = pytest.mark.slow


def _threaded(src: Path, out: Path, precision: str, threads: int, **kw) -> Path:
    return generate(src, out, precision=precision, threads=threads, **kw)


def _parallel_steps(folder: Path) -> list[str]:
    """The kernels of the steps model.c runs with es_parallel_for (one per task fn)."""
    text = (folder / "model.c").read_text()
    tasks = re.findall(r"static void es_task_\d+\(void \*ctx, int k\) \{.*?case 0: [^\n]*\n"
                       r"\s+(es_\w+)\(", text, re.S)
    assert text.count("es_parallel_for(") == len(tasks)
    return tasks


def _inputs(shape: tuple[int, ...], n: int = 3) -> np.ndarray:
    return np.random.default_rng(7).standard_normal((n, *shape[1:])).astype(np.float32)


@pytest.fixture(scope="module")
def mnv2_c_int8(work, mnv2_qdq) -> Path:
    return generate(mnv2_qdq, work / "mnv2_c_int8_t1", precision="int8")


@pytest.fixture(scope="module")
def mnv2_c_fp32(work, mnv2_onnx) -> Path:
    return generate(mnv2_onnx, work / "mnv2_c_fp32_t1")


@pytest.fixture(scope="module")
def mnv2_int8_t2(work, mnv2_qdq) -> Path:
    return _threaded(mnv2_qdq, work / "mnv2_c_int8_t2", "int8", 2)


@pytest.mark.parametrize("threads", [2, 4])
@pytest.mark.parametrize("model", ["digits", "mnv2"])
@pytest.mark.parametrize("precision", ["int8", "fp32"])
def test_threaded_outputs_equal_single_thread_exactly(request, work, model, precision,
                                                      threads):
    """Every output value bit for bit. Digits splits every sliceable step (its convs are
    below the default work threshold); the MobileNetV2-style net uses the default."""
    single = request.getfixturevalue({("digits", "int8"): "digits_c_int8",
                                      ("digits", "fp32"): "digits_c",
                                      ("mnv2", "int8"): "mnv2_c_int8",
                                      ("mnv2", "fp32"): "mnv2_c_fp32"}[model, precision])
    src = request.getfixturevalue({("digits", "int8"): "digits_qdq",
                                   ("digits", "fp32"): "digits_onnx",
                                   ("mnv2", "int8"): "mnv2_qdq",
                                   ("mnv2", "fp32"): "mnv2_onnx"}[model, precision])
    kw = {"split_min_macs": 0} if model == "digits" else {}
    multi = _threaded(src, work / f"{model}_{precision}_t{threads}", precision, threads, **kw)
    split = _parallel_steps(multi)
    assert split, "no step was split: the comparison would prove nothing"
    if model == "mnv2":  # the heavy kernels of both precisions are among them
        want = {"int8": {"es_dwconv2d_i8_hwc"}, "fp32": {"es_dwconv2d_f32",
                                                        "es_conv2d_f32_gemm"}}[precision]
        assert want <= set(split), split
    (ishape,), _ = run.io_shapes(single)
    x = _inputs(ishape)
    a, b = run.run(single, x), run.run(multi, x)
    assert np.array_equal(a, b), f"max |diff| {np.abs(a - b).max()}"


@pytest.mark.parametrize("precision", ["int8", "fp32"])
def test_native_isa_kernels_split_equal_single_thread(request, work, precision):
    """-O3 -march=native: the kernels the host's ISA picks (with AVX-512 VNNI the int8
    dot-product convs, pixels or channels in the lanes), split over 3 threads (ranges
    of unequal size) against one thread, every step above no threshold split."""
    from edgesmith.targets.isa import has_vnni

    src = request.getfixturevalue("mnv2_qdq" if precision == "int8" else "mnv2_onnx")
    kw = {"precision": precision, "cflags": "-O3 -march=native"}
    single = generate(src, work / f"mnv2_{precision}_native_t1", **kw)
    multi = generate(src, work / f"mnv2_{precision}_native_t3", threads=3, split_min_macs=0,
                     **kw)
    split = set(_parallel_steps(multi))
    if precision == "int8" and has_vnni("cc", "-O3 -march=native"):
        assert {"es_conv2d_i8_dot", "es_conv2d_i8_cl", "es_dwconv2d_i8_hwc"} <= split, split
    (ishape,), _ = run.io_shapes(single)
    x = _inputs(ishape)
    a, b = run.run(single, x), run.run(multi, x)
    assert np.array_equal(a, b), f"max |diff| {np.abs(a - b).max()}"


def test_one_thread_generates_the_single_thread_code(work, digits_qdq, digits_c_int8):
    """threads: 1 is today's code path: same model.c, no pool sources, no pthread."""
    one = _threaded(digits_qdq, work / "digits_int8_t1_explicit", "int8", 1)
    assert (one / "model.c").read_text() == (digits_c_int8 / "model.c").read_text()
    assert not (one / "es_threads.c").exists()
    assert "pthread" not in (one / "Makefile").read_text()
    assert "#define ES_THREADS 1 " in (one / "model.h").read_text()


def _harness(folder: Path, name: str, flags: list[str]) -> Path:
    return compile_harness(folder, folder / name, [*flags, "-pthread"])


def _run(binary: Path, *args: str, env: dict | None = None) -> dict:
    p = subprocess.run([str(binary), *args], capture_output=True, text=True, env=env,
                       cwd=binary.parent, timeout=600)
    assert p.returncode == 0 and not p.stderr.strip(), p.stdout + p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("sanitizer", ["address,undefined", "thread"])
def test_sanitizers_are_clean_with_threads(mnv2_int8_t2, sanitizer):
    """Time-sliced runs with hooks (every step's before/after once, on the caller) and
    a full run, equal outputs, under ASan+UBSan and under TSan, which reports any data
    race between the pool's threads."""
    h = _harness(mnv2_int8_t2, f"harness_{sanitizer.replace(',', '_')}",
                 ["-O1", "-g", f"-fsanitize={sanitizer}", "-fno-sanitize-recover=all"])
    env = {**os.environ, "TSAN_OPTIONS": "halt_on_error=1", "ASAN_OPTIONS": "detect_leaks=0"}
    for k in (1, 1000):
        out = _run(h, "slice", str(k), env=env)
        assert out["rc"] == 0 and out["same"] == 1
        assert out["before"] == out["after"] == out["steps"]


def test_no_allocation_after_init_with_threads(mnv2_int8_t2, tmp_path):
    shim = tmp_path / "malloc_count.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-O1", "-o", str(shim),
                    str(HARNESS / "malloc_count.c")], check=True)
    h = _harness(mnv2_int8_t2, "harness_noalloc_threads", ["-O1"])
    out = _run(h, "noalloc", "300", env={**os.environ, "LD_PRELOAD": str(shim)})
    assert out == {"allocations": 0, "runs": 300, "same": 1}


def test_cortex_m7_profile_refuses_threads(tmp_path):
    """The bundled cortex-m7 profile with threads: 2 is an options error (exit 2) that
    says why and what to do, before any build."""
    import yaml

    prof = yaml.safe_load((ROOT / "profiles" / "bundled" / "cortex-m7.yaml").read_text())
    prof["targets"][0]["options"]["threads"] = 2
    path = tmp_path / "m7_threads.yaml"
    path.write_text(yaml.safe_dump(prof, sort_keys=False))
    edgesmith = Path(os.environ.get("VIRTUAL_ENV", ROOT / ".venv")) / "bin" / "edgesmith"
    p = subprocess.run([str(edgesmith), "profiles", "validate", str(path)], capture_output=True,
                       text=True, timeout=300)
    out = p.stdout + p.stderr
    assert p.returncode == 2, out
    assert "threads" in out and "Cortex-M" in out and "Traceback" not in out


@pytest.mark.parametrize("threads", [0, 65])
def test_threads_out_of_range_is_an_options_error(threads):
    from pydantic import ValidationError

    from edgesmith.targets.c_target import COptions

    with pytest.raises(ValidationError, match="threads"):
        COptions(threads=threads)


def test_bare_metal_device_refuses_threads_whatever_the_compiler():
    from types import SimpleNamespace

    from edgesmith.errors import ProfileError
    from edgesmith.targets.c_target import COptions, _check_threads

    prof = SimpleNamespace(name="m4", device=SimpleNamespace(arch="cortex-m", os="baremetal"))
    with pytest.raises(ProfileError, match="POSIX threads"):
        _check_threads(COptions(threads=2), prof)
    _check_threads(COptions(threads=1), prof)  # the default builds as before
