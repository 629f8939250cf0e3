"""Lazy access to the ``faiss`` module, so ``import dense`` stays light, and the OpenMP
thread policy every FAISS call in this package runs under (each ``FaissIndex`` carries
its own search thread count; nothing here is process-wide state).

Why a policy here rather than one ``faiss.omp_set_num_threads`` call at start-up: OpenMP
keeps the thread count per calling thread (libgomp's ``nthreads-var`` is a per-thread
ICV), so a setting made on the thread that opened the engine does not reach searches
issued from request threads, and a one-thread setting meant for small queries would also
starve a graph build. Each call therefore sets the count for its own duration.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import os
from collections.abc import Iterator
from typing import Any


@functools.cache
def faiss_module() -> Any:
    """Import ``faiss`` on first use (it pulls in OpenMP and BLAS)."""
    return importlib.import_module("faiss")


def build_threads() -> int:
    """Every core the process may run on (OpenMP's default team size here)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


@contextlib.contextmanager
def omp_threads(threads: int | None) -> Iterator[None]:
    """Run the block with ``threads`` OpenMP threads on this thread, then restore."""
    if threads is None:
        yield
        return
    faiss = faiss_module()
    previous = int(faiss.omp_get_max_threads())
    if previous == threads:
        yield
        return
    faiss.omp_set_num_threads(threads)
    try:
        yield
    finally:
        faiss.omp_set_num_threads(previous)


def background_build_threads() -> int:
    """Background graph builds leave one core to the searches they run beside (on two
    cores: one build thread; searches during a build stay under a second at a million
    vectors instead of queueing behind a build on every core)."""
    return max(1, build_threads() - 1)
