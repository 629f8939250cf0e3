"""Lazy access to the ``faiss`` module, so ``import dense`` stays light."""

from __future__ import annotations

import functools
import importlib
from typing import Any


@functools.cache
def faiss_module() -> Any:
    """Import ``faiss`` on first use (it pulls in OpenMP and BLAS)."""
    return importlib.import_module("faiss")
