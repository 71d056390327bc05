"""The ``edgesmith`` command line: a thin shell over ``edgesmith.pipeline``.

Each command lives in its own module and registers itself on the shared app on import.
"""

from . import bench, build, cache, compress, inspect, plan, profiles  # noqa: F401  (registers)
from .app import app, main

__all__ = ["app", "main"]
