"""The local cluster listens on the loopback interface only and calls nowhere."""

from __future__ import annotations

import os

import pytest

ray = pytest.importorskip("ray")


def test_local_cluster_is_loopback_only_without_usage_stats(ray_cluster: None) -> None:
    assert ray.util.get_node_ip_address() == "127.0.0.1"
    assert {node["NodeManagerAddress"] for node in ray.nodes()} == {"127.0.0.1"}
    assert os.environ["RAY_USAGE_STATS_ENABLED"] == "0"


def test_the_core_never_imports_the_cluster_package() -> None:
    import subprocess
    import sys

    code = "import engine, engine.corpus, engine.engine, sys; print('ray' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300
    )
    assert out.stdout.strip() == "False"
