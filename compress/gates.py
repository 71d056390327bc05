"""Accuracy gates: every compression step is measured against the original FP32 model.

The budget is ``budgets.accuracy_drop`` in absolute top-1 points. A step over budget
raises :class:`BudgetError` (exit 3) with the figures and what to try; with
``no_budget`` the same verdict is recorded in the manifest and the build goes on.
Converters can call :func:`check` too (step ``"tflite-int8"``, fix :data:`PTQ_FIX`).
"""

from __future__ import annotations

from typing import Any

from edgesmith.errors import BudgetError

PTQ_FIX = "enable compress.qat (quantization-aware training instead of post-training INT8)"


def check(step: str, fp32: float, after: float, budget: float | None, *,
          no_budget: bool = False, fix: str = "") -> dict[str, Any]:
    """Verdict for one step; accuracies are 0..1, ``budget`` is in top-1 points."""
    drop = round(100.0 * (fp32 - after), 4)
    verdict: dict[str, Any] = {"step": step, "accuracy_fp32": fp32, "accuracy": after,
                               "drop_points": drop, "budget_points": budget,
                               "ok": budget is None or drop <= budget + 1e-9}
    if verdict["ok"] or no_budget:
        return verdict
    raise BudgetError(
        f"{step} drops top-1 accuracy by {drop:.2f} points "
        f"({100 * fp32:.2f}% FP32 -> {100 * after:.2f}%), over the budget of {budget:g} points",
        where="budgets.accuracy_drop",
        fix=f"{fix}; or pass --no-budget to report instead of failing" if fix
        else "pass --no-budget to report instead of failing",
    )
