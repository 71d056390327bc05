"""Accuracy gates: figures vs the original FP32, exit code 3, --no-budget reports."""

from __future__ import annotations

import pytest

from edgesmith.compress import gates
from edgesmith.errors import EXIT_BUDGET, BudgetError


def test_step_within_budget_passes():
    v = gates.check("prune", 0.98, 0.975, 1.0)
    assert v.ok and v.drop_points == pytest.approx(0.5) and v.error() is None


def test_step_over_budget_fails_with_the_figures_and_a_suggestion():
    e = gates.check("prune + fine-tune", 0.98, 0.95, 1.0).error(fix="lower the ratio")
    assert isinstance(e, BudgetError) and e.exit_code == EXIT_BUDGET == 3
    msg = e.message()
    assert "3.00 points" in msg and "98.00%" in msg and "95.00%" in msg
    assert "lower the ratio" in msg and "--no-budget" in msg


def test_a_miss_is_a_verdict_the_caller_records_or_raises():
    v = gates.check("qat", 0.98, 0.90, 1.0)
    assert not v.ok and v.drop_points == pytest.approx(8.0)
    assert v.to_json()["ok"] is False and v.to_json()["drop_points"] == pytest.approx(8.0)


def test_without_a_budget_every_step_passes():
    assert gates.check("prune", 0.98, 0.10, None).ok
