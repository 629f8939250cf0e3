"""Docs that run: every ```python block in the README executes as written."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

README = Path(__file__).parents[1] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)
# The blocks that start (or join) a Ray cluster: tests/conftest.py runs them on the worker
# of the cluster tests (one Ray cluster per worker), and each is shut down after its block.
RAY_BLOCKS = frozenset(
    i
    for i, block in enumerate(BLOCKS)
    if re.search(r"engine\.cluster|ShardedCorpus|\bimport ray\b|\bray\.", block)
)


def test_readme_has_examples() -> None:
    assert BLOCKS


@pytest.mark.parametrize("block", range(len(BLOCKS)))
def test_readme_block_runs(block: int, tmp_path: Path) -> None:
    ray_was_up = _ray_is_up()
    cwd = Path.cwd()
    os.chdir(tmp_path)  # the examples write ./tandem-data
    try:
        exec(compile(BLOCKS[block], f"README.md block {block}", "exec"), {})
    finally:
        os.chdir(cwd)
        if not ray_was_up and _ray_is_up():  # a local cluster the block started: stop it
            sys.modules["ray"].shutdown()


def _ray_is_up() -> bool:
    """Whether this process is connected to Ray (never imports it: most blocks do not)."""
    ray = sys.modules.get("ray")
    return ray is not None and bool(ray.is_initialized())


def test_readme_opens_with_the_two_commands() -> None:
    text = README.read_text(encoding="utf-8")
    # The first command block; only the CPU-only torch install may come before it (it
    # applies to these commands, so it has to be read first).
    blocks = re.findall(r"```bash\n(.*?)```", text, flags=re.S)
    assert blocks
    if blocks[0].strip().startswith("pip install torch") and len(blocks) > 1:
        assert "download.pytorch.org/whl/cpu" in blocks[0]
        blocks = blocks[1:]
    first = blocks[0]
    lines = [ln for ln in first.splitlines() if ln.strip()]
    assert len(lines) == 2
    assert "python -m bench" in lines[0]
    ci = (README.parent / ".ci" / "run").read_text(encoding="utf-8")
    test_command = lines[1].split("#")[0].strip()
    assert test_command in ci
