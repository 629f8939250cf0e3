"""Benchmarks of Tandem and its peers: a client of the public ``engine`` API.

Run ``python -m bench`` (fixture corpus) or ``python -m bench --data DIR ...``.
"""

from bench.dataset import BeirDataset, load_beir
from bench.errors import BenchError

__all__ = ["BeirDataset", "BenchError", "load_beir"]
