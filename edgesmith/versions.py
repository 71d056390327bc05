"""Versions of every tool a build depends on: recorded in manifests and in cache keys,
so a result made with one converter release is never served for another."""

from __future__ import annotations

import importlib.metadata
import platform

TOOLS = ("torch", "onnx", "onnxruntime", "onnxslim", "torch-pruning", "nncf", "openvino",
         "coremltools", "ai-edge-litert", "tensorflow", "onnx2tf", "numpy")


def tool_versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {"python": platform.python_version()}
    for name in TOOLS:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out
