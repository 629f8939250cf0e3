"""``tandem cluster``: create, load, search and health, in process on the test cluster."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

pytest.importorskip("ray.data")

from engine.cluster.manifest import read_manifest
from engine.surfaces.cli import app
from engine.surfaces.cli_args import CommandError


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output


def test_create_load_search_health(ray_cluster: None, tmp_path: Path) -> None:
    root = tmp_path / "sharded"
    source = tmp_path / "docs.jsonl"
    lines = [
        {
            "id": f"d{i}",
            "title": f"Note {i}",
            "text": f"kettle descaling step {i}",
            "year": 2000 + i,
        }
        for i in range(30)
    ]
    lines.append({"id": "s1", "text": "kettle secrets", "access_groups": ["staff"]})
    source.write_text("\n".join(json.dumps(x) for x in lines) + "\nnot json\n", "utf-8")

    code, out = run(
        "cluster",
        "create",
        str(root),
        "--name",
        "notes",
        "--shards",
        "2",
        "--no-vectors",
        "--field",
        "year:integer",
        "--title-weight",
        "2",
    )
    assert code == 0, out
    assert read_manifest(root).config.title_weight == 2
    code, out = run("cluster", "load", str(root), str(source), "--quiet")
    assert code == 0, out
    assert "written 31" in out and "rejected 1" in out
    assert "rejected: docs.jsonl line 32: not valid JSON" in out  # as `tandem add` says
    every_line_bad = tmp_path / "bad.jsonl"
    every_line_bad.write_text("not json\nnor this\n", "utf-8")
    code, out = run("cluster", "load", str(root), str(every_line_bad), "--quiet")
    assert code == 1 and "written 0" in out and "rejected 2" in out  # as after `tandem add`
    mixed = tmp_path / "mixed"  # Parquet files that disagree on a column's type
    mixed.mkdir()
    pq.write_table(pa.table({"id": ["p1"], "text": ["a"], "year": [2001]}), mixed / "a.parquet")
    pq.write_table(pa.table({"id": ["p2"], "text": ["b"], "year": ["x"]}), mixed / "b.parquet")
    refused = CliRunner().invoke(app, ["cluster", "load", str(root), str(mixed), "--quiet"])
    # A CommandError: `tandem` prints it as one "tandem: error:" line, not a traceback.
    assert isinstance(refused.exception, CommandError), refused.exception
    assert str(refused.exception).startswith("cannot load: Arrow")  # the columns disagree
    # Review: Parquet told by its magic bytes, or by --format, was dropped by Ray Data's
    # default of ".parquet" names only ("no files found", and a traceback).
    unnamed = tmp_path / "part-0"
    pq.write_table(pa.table({"id": ["q1"], "text": ["kettle magic"]}), unnamed)
    code, out = run("cluster", "load", str(root), str(unnamed), "--quiet")
    assert code == 0 and "written 1" in out, out
    told = tmp_path / "part-1.pq"
    pq.write_table(pa.table({"id": ["q2"], "text": ["kettle told"]}), told)
    code, out = run("cluster", "load", str(root), str(told), "--format", "parquet", "--quiet")
    assert code == 0 and "written 1" in out, out
    # Review: a folder given with another path crashed (the newer reader lists paths on
    # threads that each import fsspec's HTTP filesystem); a folder's other files skipped.
    folder = tmp_path / "folder"
    folder.mkdir()
    pq.write_table(pa.table({"id": ["f1"], "text": ["kettle folder"]}), folder / "x.parquet")
    (folder / "_SUCCESS").write_bytes(b"")
    extra = tmp_path / "extra.parquet"
    pq.write_table(pa.table({"id": ["f2"], "text": ["kettle extra"]}), extra)
    from ray.data import DataContext

    reader = DataContext.get_current().use_datasource_v2
    bars = DataContext.get_current().enable_progress_bars
    code, out = run("cluster", "load", str(root), str(folder), str(extra), "--quiet")
    assert code == 0 and "written 2" in out, out
    assert DataContext.get_current().use_datasource_v2 == reader  # put back
    assert DataContext.get_current().enable_progress_bars == bars  # --quiet: put back too
    empty = tmp_path / "empty-folder"
    empty.mkdir()
    code, out = run("cluster", "load", str(root), str(empty), "--quiet")
    assert code == 0 and "written 0" in out, out  # nothing to load: no traceback
    code, out = run(
        "cluster",
        "search",
        str(root),
        "kettle descaling",
        "--json",
        "-k",
        "50",
        "--filter",
        '{"year": {"gte": 2020}}',
    )
    assert code == 0, out
    hits = json.loads(out)["passages"]
    assert {h["source_id"] for h in hits} == {f"d{i}" for i in range(20, 30)}
    code, out = run(
        "cluster", "search", str(root), "kettle descaling", "--json", "--global-term-statistics"
    )
    assert code == 0, out
    found = [h["source_id"] for h in json.loads(out)["passages"]]
    assert len(found) == 10 and set(found) <= {f"d{i}" for i in range(30)}  # never "s1"
    code, out = run("cluster", "health", str(root), "--json")
    assert code == 0, out
    shards = json.loads(out)
    assert [s["up"] for s in shards] == [True, True]
    assert sum(s["documents"] for s in shards) == 35
    code, out = run("cluster", "create", str(root), "--name", "notes", "--shards", "2")
    assert code != 0  # the directory already holds a sharded corpus
    other = tmp_path / "other"
    bad_args = (
        ["--fusion", "borda"],
        ["--title-weight", "9"],
        ["--embedder", "none"],  # names no model: --no-vectors, as `tandem create` says
        ["--embedder", "x", "--no-vectors"],
    )
    for bad in bad_args:
        code, out = run("cluster", "create", str(other), "--name", "x", "--shards", "1", *bad)
        assert code == 2, (bad, out)
    assert not other.exists()
