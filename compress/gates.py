"""Accuracy gates: every compression step is measured against the original FP32 model.

The budget is ``budgets.accuracy_drop`` in absolute top-1 points. :func:`check` returns
a :class:`Verdict`; a step over budget gives a :class:`BudgetError` (exit 3) with the
figures and what to try, which the caller raises, or, with ``no_budget``, records in the
manifest while the build goes on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from edgesmith.errors import BudgetError


@dataclass(frozen=True)
class Verdict:
    """One step's accuracy against the FP32 model and the budget; ``error`` turns a miss
    into the BudgetError the caller raises (or records, with ``--no-budget``)."""

    step: str
    accuracy_fp32: float
    accuracy: float
    budget_points: float | None

    @property
    def drop_points(self) -> float:
        return round(100.0 * (self.accuracy_fp32 - self.accuracy), 4)

    @property
    def ok(self) -> bool:
        return self.budget_points is None or self.drop_points <= self.budget_points + 1e-9

    def to_json(self) -> dict[str, Any]:
        return {"step": self.step, "accuracy_fp32": self.accuracy_fp32,
                "accuracy": self.accuracy, "drop_points": self.drop_points,
                "budget_points": self.budget_points, "ok": self.ok}

    def error(self, fix: str = "") -> BudgetError | None:
        """The BudgetError for a miss, with the figures and what to try; None when ok."""
        if self.ok:
            return None
        return BudgetError(
            f"{self.step} drops top-1 accuracy by {self.drop_points:.2f} points "
            f"({100 * self.accuracy_fp32:.2f}% FP32 -> {100 * self.accuracy:.2f}%), "
            f"over the budget of {self.budget_points:g} points",
            where="budgets.accuracy_drop",
            fix=f"{fix}; or pass --no-budget to report instead of failing" if fix
            else "pass --no-budget to report instead of failing",
        )


def check(step: str, fp32: float, after: float, budget: float | None) -> Verdict:
    """Verdict for one step; accuracies are 0..1, ``budget`` is in top-1 points."""
    return Verdict(step, fp32, after, budget)
