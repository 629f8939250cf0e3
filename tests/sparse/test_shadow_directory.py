"""``ShadowDirectory`` (read-only tantivy access) leaves nothing behind in the temp dir.

Review: a read-only engine whose process ended without ``close()`` — a script that just
returns, a worker killed and restarted — left one ``tandem-readonly-*`` directory per
corpus in the temp dir, every time.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from sparse.shadow_dir import ShadowDirectory

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def temp_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This test's own temp dir, so no other process's shadow directories are seen."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    return temp


@pytest.fixture
def source(tmp_path: Path) -> Path:
    index = tmp_path / "index"
    index.mkdir()
    (index / "meta.json").write_text("{}")
    return index


def _shadows(temp_dir: Path) -> list[str]:
    return sorted(p.name for p in temp_dir.iterdir() if p.name.startswith("tandem-readonly-"))


def test_closing_or_dropping_it_removes_the_directory(temp_dir: Path, source: Path) -> None:
    closed = ShadowDirectory(source)
    assert (closed.sync() / "meta.json").read_text() == "{}"
    closed.close()
    dropped = ShadowDirectory(source)
    dropped.sync()
    assert len(_shadows(temp_dir)) == 1
    del dropped
    gc.collect()
    assert _shadows(temp_dir) == []


_ABANDONING = """
import os, sys
from pathlib import Path
from sparse.shadow_dir import ShadowDirectory
shadow = ShadowDirectory(Path(sys.argv[1]))
shadow.sync()
print(shadow.path.name, flush=True)
os._exit(0)  # as SIGKILL would: no close, no finalizer
"""


def test_one_whose_process_died_is_removed_by_the_next(temp_dir: Path, source: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _ABANDONING, str(source)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(temp_dir)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    abandoned = done.stdout.strip()
    assert _shadows(temp_dir) == [abandoned]  # left behind: the process never closed it
    live = ShadowDirectory(source)
    try:
        assert _shadows(temp_dir) == [live.path.name]  # the dead one's went, not ours
        other_live = ShadowDirectory(source)  # and a live one is never taken for dead
        assert sorted(_shadows(temp_dir)) == sorted([live.path.name, other_live.path.name])
        other_live.close()
    finally:
        live.close()
    assert _shadows(temp_dir) == []
    assert (source / "meta.json").read_text() == "{}"  # the real files are untouched


def test_a_forked_child_leaves_its_parents_directory_alone(temp_dir: Path, source: Path) -> None:
    """Review: the child inherited the finalizer and, at its exit or closing its copy,
    removed the parent's live directory; the parent's reader then stopped following.
    (Interpreter exit calls the same finalizer that ``close`` calls.)"""
    shadow = ShadowDirectory(source)
    try:
        pid = os.fork()
        if pid == 0:
            try:
                shadow.close()
            finally:
                os._exit(0)  # never back into pytest's frames
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert shadow.path.is_dir(), "the child removed its parent's directory"
        assert (shadow.sync() / "meta.json").read_text() == "{}"
        assert _shadows(temp_dir) == [shadow.path.name]
        ShadowDirectory(source).close()  # its owner lock still held: not swept either
        assert _shadows(temp_dir) == [shadow.path.name]
    finally:
        shadow.close()
    assert _shadows(temp_dir) == []
