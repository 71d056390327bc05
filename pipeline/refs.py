"""Resolve ``file.py:callable`` and ``package.module:callable`` references.

Users point edgesmith at their own code; a typo there must name the file and the
missing name, not surface as an ImportError traceback from deep inside importlib.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from edgesmith.errors import EdgesmithError

_MODULE_REF = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


def is_callable_ref(ref: str) -> bool:
    if ":" not in ref:
        return False
    left, _, right = ref.rpartition(":")
    return left.endswith(".py") or bool(_MODULE_REF.match(ref)) and bool(right)


def _load_file_module(path: Path, error: type[EdgesmithError], ref: str) -> Any:
    if not path.is_file():
        raise error(f"file {path} does not exist", where=ref, fix="check the path before ':'")
    name = f"edgesmith_user_{abs(hash(path.resolve()))}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise error(f"cannot import {path} as Python", where=ref)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    # let the user's file import its siblings, as it would when run directly
    sys.path.insert(0, str(path.resolve().parent))
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        sys.modules.pop(name, None)
        raise error(f"importing {path} raised {type(e).__name__}: {e}", where=ref) from None
    finally:
        sys.path.remove(str(path.resolve().parent))
    return module


def import_callable(ref: str, error: type[EdgesmithError]) -> Callable[..., Any]:
    """Import the callable named by ``ref``; raise ``error`` naming what is wrong."""
    target, _, attr = ref.rpartition(":")
    if target.endswith(".py"):
        module = _load_file_module(Path(target), error, ref)
    else:
        try:
            module = importlib.import_module(target)
        except ImportError as e:
            raise error(f"cannot import module {target}: {e}", where=ref,
                        fix="install the package or use path/to/file.py:callable") from None
        except Exception as e:
            raise error(f"importing {target} raised {type(e).__name__}: {e}", where=ref) from None
    fn = getattr(module, attr, None)
    if fn is None:
        names = [n for n in dir(module) if not n.startswith("_")]
        close = difflib.get_close_matches(attr, names, n=3)
        hint = (f"did you mean {', '.join(close)}?" if close
                else f"names there: {', '.join(names[:8])}")
        raise error(f"{target} has no {attr!r}", where=ref, fix=hint)
    if not callable(fn):
        raise error(f"{attr} in {target} is not callable", where=ref)
    return fn
