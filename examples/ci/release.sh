#!/usr/bin/env bash
# A release pipeline with edgesmith as the gate: export -> validation -> benchmark ->
# quantization -> package. Each step's exit code fails the job on its own:
#   2 bad input, 3 budget missed, 4 conversion failed, 5 device failed.
#
#   MODEL=weights.pt ARCH=model.py:build DATA=data.npz PROFILE=board.yaml \
#       OUT=build/release examples/ci/release.sh
#
# Set BENCH_HOST=user@board to benchmark on the device instead of this machine.
# Every artifact is run on the runtime releases the profile declares (`runtimes:`), each in
# an isolated environment, before it is packaged (--verify-runtimes; exit 4 when one fails).
set -euo pipefail

EDGESMITH=${EDGESMITH:-edgesmith}
MODEL=${MODEL:-examples/digits/digits.pt}
ARCH=${ARCH:-examples/digits/model.py:build}
DATA=${DATA:-digits}
PROFILE=${PROFILE:-host}
OUT=${OUT:-build/release}
RUNS=${RUNS:-50}

mkdir -p "$OUT"
step() { printf '\n== %s\n' "$*" >&2; }

step "export + validation: FP32 ONNX must match the torch model"
"$EDGESMITH" convert "$MODEL" --arch "$ARCH" --data "$DATA" --profile "$PROFILE" \
    --target onnx:fp32 --verify-runtimes --out "$OUT/fp32" --json > "$OUT/fp32.json"

step "benchmark: latency on the target (budgets.latency_ms gates it, exit 3)"
if [ -n "${BENCH_HOST:-}" ]; then
    "$EDGESMITH" bench "$OUT/fp32" --host "$BENCH_HOST" --runs "$RUNS" --json > "$OUT/bench.json"
else
    "$EDGESMITH" bench "$OUT/fp32" --local --runs "$RUNS" --json > "$OUT/bench.json"
fi

step "quantization: INT8, gated by budgets.accuracy_drop (exit 3)"
"$EDGESMITH" convert "$MODEL" --arch "$ARCH" --data "$DATA" --profile "$PROFILE" \
    --target onnx:int8 --verify-runtimes --out "$OUT/int8" --json > "$OUT/int8.json"

step "package: the validated build folders, their manifests and a checksum"
tar -C "$OUT" -czf "$OUT/release.tar.gz" fp32 int8 fp32.json int8.json bench.json
(cd "$OUT" && sha256sum release.tar.gz > release.tar.gz.sha256)
echo "$OUT/release.tar.gz"
