"""The parity bound on the largest error, per precision: float artifacts are judged on every
sample; INT8 on the 99th percentile of per-sample errors, because INT8 saturates on the few
inputs past its calibrated ranges. A scale error on every sample is still rejected at every
precision, and so is an error on more than 1 % of samples; the max is still reported.

The runner contract is a plain function of a batch, so numpy stands in for an artifact whose
outputs are placed exactly: which samples err and by how much is what is under test."""

from __future__ import annotations

import numpy as np
import pytest

from edgesmith.pipeline import validate

N = 1000


def _judge(halved: np.ndarray | slice):
    """Validate an 'artifact' that returns the reference with the samples in ``halved``
    scaled by 0.5 (what one saturated early activation did to EfficientNet-B0's logits)."""
    rng = np.random.default_rng(3)
    ref = rng.normal(0, 0.3, (N, 10)).astype(np.float32)
    ref[np.arange(N), np.arange(N) % 10] += 10.0  # a clear top-1 per sample
    y = np.arange(N) % 10
    x = np.arange(N, dtype=np.float32)[:, None]  # the sample's index: the runner reads it

    def runner(b: np.ndarray) -> np.ndarray:
        out = ref[b[:, 0].astype(int)].copy()
        mask = np.zeros(N, bool)
        mask[halved] = True
        out[mask[b[:, 0].astype(int)]] *= 0.5
        return out

    return validate.validate(runner, x, y, ref, 1.0, measure_latency=False)


def test_int8_passes_a_few_saturated_samples_and_reports_the_max():
    v = _judge(np.array([7, 100, 400, 801, 999]))  # 0.5 % of the samples
    assert v.rel_err > validate.PARITY_MAX_REL_ERR["int8"]  # the max is still there to read
    assert v.rel_err_p99 == 0.0
    assert v.parity_ok("int8")
    assert v.to_json()["parity"]["rel_err"] == v.rel_err
    for precision in ("fp32", "fp16"):
        assert not v.parity_ok(precision)
        assert v.parity_problem(precision).startswith("max error")


@pytest.mark.parametrize("halved", [slice(None), slice(0, 30)], ids=["every sample", "3 %"])
def test_int8_rejects_errors_beyond_one_percent_of_samples(halved):
    v = _judge(halved)
    assert v.top1_agreement == 1.0  # halving keeps every argmax: only the bound can catch it
    assert not v.parity_ok("int8")
    assert v.parity_problem("int8").startswith("99th-percentile sample error")
