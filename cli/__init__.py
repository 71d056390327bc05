"""The ``edgesmith`` command line: a thin shell over ``edgesmith.pipeline``."""

from .app import app, main

__all__ = ["app", "main"]
