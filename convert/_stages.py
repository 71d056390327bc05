"""One wrapper for the steps of a converter that call into a third-party library.

Named ``_stages`` so the target registry's module discovery skips it: it defines no format.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from typing import TypeVar

from edgesmith.errors import ConversionError
from edgesmith.target import ConvertContext

T = TypeVar("T")


def run_stage(ctx: ConvertContext, fmt: str, stage: str, fn: Callable[[], T]) -> T:
    """Run ``fn``; a library's own exception becomes a ConversionError naming the format and
    the stage, with the full traceback kept in the target's log."""
    try:
        return fn()
    except ConversionError:
        raise
    except Exception as e:
        ctx.log(f"{fmt} {stage} failed:\n{traceback.format_exc()}")
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise ConversionError(f"{type(e).__name__}: {first[:300]}", where=f"{fmt} {stage}",
                              fix=f"full converter output in {ctx.log_path}") from None
