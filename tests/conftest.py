"""Session-wide fixtures shared by every test package."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from dense.local import SentenceTransformerEmbedder

# Property tests run the same examples on every run and have no per-example deadline, on
# any machine (Hypothesis' built-in "ci" profile does the same, but only where it detects a
# CI; this one is loaded everywhere). A test's own @settings still overrides these fields.
settings.register_profile(
    "tandem",
    deadline=None,
    derandomize=True,
    database=None,  # derandomized: nothing to replay; no .hypothesis/ in the checkout
    suppress_health_check=[HealthCheck.too_slow],  # as the "ci" profile: slow boxes
)
settings.load_profile("tandem")

# Run first, so the two xdist workers finish together: the files that take the longest.
_LONGEST_FIRST = (
    "tests/engine/write/test_crash_safety.py",
    "tests/engine/test_hostile_input.py",
    "tests/engine/surfaces/test_cli.py",
    "tests/engine/cluster",
)


_CLUSTER_GROUP = "tests/engine/cluster"


def _group(item: pytest.Item, root: Path) -> str:
    relative = item.path.relative_to(root).as_posix()
    # One local Ray cluster per worker is all a 2-core machine can hold: every cluster test
    # runs on the same worker — the README examples that start Ray too (tests/test_readme.py
    # names them in RAY_BLOCKS).
    if relative.startswith(_CLUSTER_GROUP + "/") or _runs_a_ray_readme_block(item):
        return _CLUSTER_GROUP
    return relative


def _runs_a_ray_readme_block(item: pytest.Item) -> bool:
    callspec = getattr(item, "callspec", None)
    module = getattr(item, "module", None)
    if callspec is None or module is None or not hasattr(module, "RAY_BLOCKS"):
        return False
    return callspec.params.get("block") in module.RAY_BLOCKS


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups off the markers
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under xdist (``-n``): one group per test file (module fixtures, the hostile-input
    counters) and one for the Ray tests, the longest groups first."""
    if not config.pluginmanager.hasplugin("xdist"):
        return
    root = config.rootpath
    rank = {name: i for i, name in enumerate(_LONGEST_FIRST)}
    groups = {id(item): _group(item, root) for item in items}
    items.sort(key=lambda item: rank.get(groups[id(item)], len(rank)))  # stable otherwise
    for item in items:
        item.add_marker(pytest.mark.xdist_group(groups[id(item)]))


@pytest.fixture(scope="session")
def shared_minilm(tmp_path_factory: pytest.TempPathFactory) -> SentenceTransformerEmbedder:
    """The real default model (offline package), loaded once for the whole session."""
    cache: Path = tmp_path_factory.mktemp("tandem-onnx-cache")
    embedder = SentenceTransformerEmbedder(cache_dir=cache)
    embedder.warm_up()
    return embedder


_OWN_LOGGERS = ("engine", "sparse", "dense", "fusion", "bench")


@pytest.fixture(autouse=True)
def _logging_restored() -> Iterator[None]:
    """Undo what an in-process CLI run does to logging (the ``tandem`` callback sets our
    loggers to ERROR): a later test's ``caplog`` must see every record, whichever test
    ran before it. (Root handlers are pytest's own during a test: left alone.)"""
    levels = {name: logging.getLogger(name).level for name in _OWN_LOGGERS}
    yield
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)
