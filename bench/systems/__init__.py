"""Benchmarked systems, each behind the ``BenchSystem`` protocol (one module per system)."""

__all__: list[str] = []
