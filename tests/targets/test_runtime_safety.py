"""Safety of the generated runtime: no allocation after es_init, hostile weights files,
sanitizers, valgrind, resumable time slicing with hooks."""

from __future__ import annotations

import json
import struct
import subprocess
import zlib

import pytest

from edgesmith.targets import run
from tests.conftest import require_tools
from tests.targets._helpers import HARNESS, compile_harness


def _harness(folder, name, flags=None):
    return compile_harness(folder, folder / name, flags)


def _run(binary, *args, env=None, cwd=None):
    p = subprocess.run([str(binary), *args], capture_output=True, text=True, env=env,
                       cwd=cwd or binary.parent, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout.strip()


def test_no_allocation_in_1000_runs_after_init(digits_c, tmp_path):
    shim = tmp_path / "malloc_count.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-O1", "-o", str(shim),
                    str(HARNESS / "malloc_count.c")], check=True)
    h = _harness(digits_c, "harness_noalloc")
    import os

    out = json.loads(_run(h, "noalloc", "1000", env={**os.environ, "LD_PRELOAD": str(shim)}))
    assert out == {"allocations": 0, "runs": 1000, "same": 1}


def test_time_sliced_run_resumes_and_matches_full_run(digits_c):
    h = _harness(digits_c, "harness_slice")
    for k in (1, 3, 1000):
        out = json.loads(_run(h, "slice", str(k)))
        assert out["rc"] == 0 and out["same"] == 1
        assert out["slices"] == -(-out["steps"] // k)
        assert out["before"] == out["after"] == out["steps"]
    duty = json.loads(_run(h, "duty", "2", "100"))
    assert duty["rc"] == 0 and duty["same"] == 1


def _weights_variants(good: bytes):
    payload = good[64:]
    yield "truncated header", good[:40]
    yield "truncated payload", good[:64 + len(payload) // 2]
    yield "empty", b""
    yield "bad magic", b"XXXX" + good[4:]
    yield "wrong version", good[:4] + struct.pack("<I", 99) + good[8:]
    yield "wrong model", good[:12] + struct.pack("<I", 0x1234) + good[16:]
    yield "wrong count", good[:8] + struct.pack("<I", 1) + good[12:]
    yield "huge payload size", good[:16] + struct.pack("<Q", 2**62) + good[24:]
    flipped = bytearray(good)
    flipped[64 + len(payload) // 3] ^= 0x40
    yield "corrupted payload", bytes(flipped)
    # header consistent with a corrupted payload except the CRC: still caught
    bad = bytearray(flipped)
    bad[24:28] = struct.pack("<I", zlib.crc32(bytes(bad[64:])) ^ 1)
    yield "crc mismatch", bytes(bad)


@pytest.mark.slow
def test_hostile_weights_files_return_errors_under_asan(digits_c, tmp_path):
    h = _harness(digits_c, "harness_asan", ["-O1", "-g", "-fsanitize=address,undefined",
                                            "-fno-sanitize-recover=all"])
    good = (digits_c / "weights.bin").read_bytes()
    assert _run(h, "weights", str(digits_c / "weights.bin")).startswith("0 ")
    import random

    rng = random.Random(0)
    variants = list(_weights_variants(good))
    for i in range(40):  # random header/payload byte mutations
        b = bytearray(good)
        pos = rng.randrange(0, 64) if i % 2 else rng.randrange(64, len(good))
        b[pos] ^= 1 << rng.randrange(8)
        variants.append((f"mutation@{pos}", bytes(b)))
    for name, data in variants:
        f = tmp_path / "w.bin"
        f.write_bytes(data)
        out = _run(h, "weights", str(f))
        code = int(out.split()[0])
        if data == good:
            continue
        mutated_padding = name.startswith("mutation@") and int(name[9:]) in range(32, 64)
        assert code < 0 or mutated_padding, f"{name}: accepted ({out})"
    assert "no such file" not in _run(h, "weights", str(tmp_path / "missing.bin"))


@pytest.mark.slow
def test_asan_ubsan_build_runs_clean(digits_c_int8, digits_c):
    for folder in (digits_c, digits_c_int8):
        h = _harness(folder, "harness_san", ["-O1", "-g", "-fsanitize=address,undefined",
                                             "-fno-sanitize-recover=all"])
        out = json.loads(_run(h, "slice", "4"))
        assert out["same"] == 1


@pytest.mark.slow
def test_valgrind_reports_no_errors(digits_c_int8):
    require_tools("valgrind")
    b = run.build(digits_c_int8)
    p = subprocess.run(["valgrind", "--error-exitcode=9", "--leak-check=full", str(b),
                        "--runs", "3", "--warmup", "0"], capture_output=True, text=True,
                       cwd=digits_c_int8, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "ERROR SUMMARY: 0 errors" in p.stderr


def test_bench_prints_one_json_line(digits_c):
    out = run.run_bench(digits_c / "edgesmith_bench", ["--runs", "20", "--warmup", "2"],
                        cwd=digits_c)
    assert set(out["latency_ms"]) == {"p50", "p90", "p99", "min", "mean"}
    assert out["runs"] == 20 and out["arena_bytes"] > 0 and out["weights_bytes"] > 0
    assert out["energy_j_per_inference"] is None  # no RAPL in this sandbox
    assert out["peak_rss_kb"] > 0
    assert "steps" not in out


def test_bench_profile_reports_every_step_by_op_and_node_name(digits_c_int8):
    import re

    out = run.run_bench(digits_c_int8 / "edgesmith_bench", ["--runs", "50", "--profile"],
                        cwd=digits_c_int8)
    model_c = (digits_c_int8 / "model.c").read_text()
    n_steps = int(re.search(r"#define ES_NUM_STEPS (\d+)",
                            (digits_c_int8 / "model.h").read_text()).group(1))
    assert [s["index"] for s in out["steps"]] == list(range(n_steps))
    assert all(f'"{s["name"]}"' in model_c for s in out["steps"])  # the ONNX node names
    assert {"Conv", "Add", "Gemm"} <= {s["op"] for s in out["steps"]}
    assert all(0 <= s["min_us"] <= s["mean_us"] for s in out["steps"])
    assert sum(s["min_us"] for s in out["steps"]) > 0  # set from the timed runs, not left 0
