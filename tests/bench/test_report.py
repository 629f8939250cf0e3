"""Report files: JSONL lines with revision and config, Markdown table, PNG plot; ratios."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from bench.dataset import portable_path
from bench.ratios import compute_ratios
from bench.report import (
    RunReport,
    best_peer_table,
    git_revision,
    render_markdown,
    rerender_markdown,
    write_report,
)
from bench.results import CorpusFloor, Status, SystemResult, skipped
from bench.run import RunConfig
from bench.significance import paired_test
from bench.systems.base import SystemName


def ok(system: SystemName, ndcg: float, p50: float, **extra: float) -> SystemResult:
    return SystemResult(
        corpus="c",
        system=system.value,
        status=Status.OK,
        n_docs=10,
        n_queries=4,
        ndcg_at_10=ndcg,
        recall_at_100=0.9,
        mrr_at_10=0.5,
        ingest_docs_per_s=100.0,
        p50_ms=p50,
        p95_ms=p50 * 2,
        qps=1000 / p50,
        peak_rss_mib=300.0,
        disk_mib=1.5,
        extra=dict(extra),
    )


RESULTS = (
    ok(SystemName.TANDEM_HYBRID, 0.75, 11.0, ingest_over_encoder=0.95),
    ok(SystemName.TANDEM_KEYWORD, 0.68, 1.2),
    ok(SystemName.TANTIVY, 0.66, 1.0),
    ok(SystemName.FAISS_FLAT, 0.70, 10.5),
    skipped("c", SystemName.TXTAI_HYBRID.value, "not installed: txtai"),
)
FLOOR = CorpusFloor("c", {"torch": 20.0, "onnx": 10.0}, vectors_from_cache=True)


def test_ratios_follow_the_targets_definitions() -> None:
    ratios = compute_ratios(FLOOR, RESULTS)
    assert ratios.floor_ms == 10.0  # the cheaper runtime
    assert ratios.hybrid_over_floor == {"tandem-hybrid": pytest.approx(1.1)}
    assert ratios.keyword_over_tantivy == pytest.approx(1.2)
    assert ratios.ingest_over_encoder == pytest.approx(0.95)
    assert ratios.hybrid_gain == pytest.approx(0.75 - 0.70)


def test_paired_ratio_is_preferred_over_separate_p50s() -> None:
    paired = ok(SystemName.LANCEDB_HYBRID, 0.7, 30.0, over_embedding=2.5)
    ratios = compute_ratios(FLOOR, (*RESULTS, paired))
    assert ratios.hybrid_over_floor["lancedb-hybrid"] == 2.5  # not 30 / 10
    assert ratios.paired == frozenset({"lancedb-hybrid"})


def test_paired_keyword_ratio_is_preferred_over_separate_p50s() -> None:
    paired = replace(RESULTS[1], extra={"over_tantivy": 1.05})
    ratios = compute_ratios(FLOOR, (RESULTS[0], paired, *RESULTS[2:]))
    assert ratios.keyword_over_tantivy == 1.05 and ratios.keyword_paired  # not 1.2 / 1.0
    assert not compute_ratios(FLOOR, RESULTS).keyword_paired


def test_ratios_are_none_when_a_needed_system_did_not_run() -> None:
    ratios = compute_ratios(FLOOR, RESULTS[:1])
    assert ratios.keyword_over_tantivy is None and ratios.hybrid_gain is None


def test_write_report_files_parse(tmp_path: Path) -> None:
    config = RunConfig(data_dirs=(tmp_path,), out_dir=tmp_path / "out")
    paths = write_report(RunReport(config, RESULTS, (FLOOR,)), tmp_path / "out")
    lines = [json.loads(x) for x in paths["jsonl"].read_text().splitlines()]
    assert [x["system"] for x in lines] == [r.system for r in RESULTS]
    assert all(x["revision"] == git_revision() for x in lines)
    assert lines[0]["config"]["systems"] == [s.value for s in SystemName]
    assert lines[0]["query_embedding_p50_ms"] == {"torch": 20.0, "onnx": 10.0}
    assert lines[-1]["status"] == "skipped" and lines[-1]["reason"] == "not installed: txtai"
    assert SystemResult.from_json(lines[0]) == RESULTS[0]
    markdown = paths["markdown"].read_text()
    assert "| tandem-hybrid | 0.7500 |" in markdown
    assert "| c | tandem-hybrid |" not in markdown  # faiss-flat is a baseline, not a peer
    assert "skipped: not installed: txtai" in markdown
    assert "tandem-hybrid p50 / embedding p50 (separate runs): 1.10×" in markdown
    assert paths["plot"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_result_files_record_no_absolute_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    data = tmp_path / "data" / "beir-c"
    config = RunConfig(data_dirs=(data,), out_dir=tmp_path / "out", cache_dir=tmp_path / "cache")
    floor = CorpusFloor("c", {}, vectors_from_cache=True, dataset_path=portable_path(data))
    paths = write_report(RunReport(config, RESULTS, (floor,)), tmp_path / "out")
    text = paths["jsonl"].read_text()
    assert str(tmp_path) not in text
    line = json.loads(text.splitlines()[0])
    assert line["dataset"] == {
        "name": "c",
        "path": "data/beir-c",
        "judgements": "test",
        "self_indexed_queries": 0,
    }
    assert line["config"]["data_dirs"] == ["data/beir-c"]
    assert line["config"]["out_dir"] == "out"


def test_portable_path_is_relative_or_under_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert portable_path(tmp_path / "a" / "b") == "a/b"
    assert portable_path(Path("x")) == "x"
    home = Path.home().resolve()
    if not tmp_path.resolve().is_relative_to(home):
        assert portable_path(home / ".cache" / "t") == "~/.cache/t"
    assert not portable_path(tmp_path.parent / "sibling").startswith("/")


def test_best_peer_row_names_the_best_peer_not_a_single_library_baseline() -> None:
    """Review: the row took any non-Tandem system (tantivy, FAISS, bm25s too) as a peer;
    the peers are the systems ``SystemSpec.peer`` names (the glue, LanceDB, txtai)."""
    glue = ok(SystemName.GLUE, 0.71, 12.0)
    bm25s = ok(SystemName.BM25S, 0.72, 1.0)  # better here, but a baseline
    lines = best_peer_table((*RESULTS, glue, bm25s))
    assert "| c | tandem-hybrid | 0.7500 | glue | 0.7100 | +0.0400 | – | – |" in lines


def test_a_run_re_rendered_from_its_jsonl_reads_as_written(tmp_path: Path) -> None:
    """``python -m bench render``: the same figures in the same tables from the jsonl."""
    config = RunConfig(data_dirs=(tmp_path,), out_dir=tmp_path / "out")
    paired = ok(
        SystemName.GLUE,
        0.71,
        12.0,
        over_embedding=1.5,
        interleaved_p50_ms=12.0,
        interleaved_embedding_p50_ms=8.0,
    )
    paths = write_report(RunReport(config, (*RESULTS, paired), (FLOOR,)), tmp_path / "out")
    again = rerender_markdown(paths["jsonl"])
    assert again == paths["markdown"].read_text()
    assert "glue p50 / embedding p50 (interleaved, same process): 1.50× (12.00 / 8.00 ms)" in again


def test_markdown_groups_rows_by_corpus() -> None:
    other = SystemResult(corpus="d", system="tantivy", status=Status.OK, n_docs=3)
    config = RunConfig(data_dirs=(Path("x"),))
    header = {
        "revision": "abc",
        "timestamp": "now",
        "machine": {"cpu": "c", "cores": 2, "python": "3"},
    }
    text = render_markdown(RunReport(config, (*RESULTS, other), (FLOOR,)), header)
    assert text.index("## c (10 docs") < text.index("## d (3 docs")


def markdown_tables(text: str) -> list[list[list[str]]]:
    """Every table of ``text``: runs of lines starting with ``|``, each line's cells."""
    tables: list[list[list[str]]] = []
    current: list[list[str]] = []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            current.append([cell.strip() for cell in line.strip().strip("|").split("|")])
        elif current:
            tables.append(current)
            current = []
    return tables


def test_every_table_has_a_separator_as_wide_as_its_header() -> None:
    # Two corpora, an OK, a skipped and an error row: every table the report writes.
    other = replace(RESULTS[0], corpus="d", n_docs=3)
    failed = SystemResult(corpus="d", system="glue", status=Status.ERROR, reason="boom")
    config = RunConfig(data_dirs=(Path("c"), Path("d")))
    header = {
        "revision": "r",
        "timestamp": "t",
        "machine": {"cpu": "c", "cores": 2, "python": "3"},
    }
    floors = (FLOOR, CorpusFloor("d", {"torch": 5.0}, vectors_from_cache=True))
    text = render_markdown(RunReport(config, (*RESULTS, other, failed), floors), header)
    tables = markdown_tables(text)
    assert len(tables) == 3  # one per corpus, then the best-peer table
    for table in tables:
        head, separator, *rows = table
        assert len(separator) == len(head), table
        assert all(cell == "---" for cell in separator), table
        assert all(len(row) == len(head) for row in rows), table


def test_git_revision_is_a_sha_or_unknown(tmp_path: Path) -> None:
    assert git_revision(tmp_path) == "unknown"  # not a checkout
    rev = git_revision()
    assert rev == "unknown" or len(rev) == 40


def with_per_query(result: SystemResult, per_query: dict[str, float]) -> SystemResult:
    mean = sum(per_query.values()) / len(per_query)
    return replace(result, ndcg_at_10=mean, per_query_ndcg10=per_query)


PEER_PER_QUERY = {f"q{i}": round(0.3 + 0.02 * i, 6) for i in range(20)}


def test_best_peer_table_pairs_per_query_scores() -> None:
    peer = with_per_query(ok(SystemName.GLUE, 0.0, 12.0), PEER_PER_QUERY)
    ahead = with_per_query(
        ok(SystemName.TANDEM_HYBRID, 0.0, 11.0), {q: v + 0.1 for q, v in PEER_PER_QUERY.items()}
    )
    # Same mean as the peer, but not on the same queries: ahead on half, behind on half.
    mixed = with_per_query(
        ok(SystemName.TANDEM_HYBRID_ZSCORE, 0.0, 11.0),
        {q: v + (0.1 if i % 2 else -0.1) for i, (q, v) in enumerate(PEER_PER_QUERY.items())},
    )
    lines = best_peer_table((ahead, mixed, peer))
    assert lines[2] == (
        "| corpus | Tandem system | Tandem | best peer | peer | Tandem − peer "
        "| 95 % CI | p (paired) |"
    )
    assert lines[3] == "|---|---|---|---|---|---|---|---|"
    assert lines[4] == (
        "| c | tandem-hybrid | 0.5900 | glue | 0.4900 | +0.1000 | [+0.1000, +0.1000] | < 0.001 |"
    )
    mixed_test = paired_test(mixed.per_query_ndcg10, peer.per_query_ndcg10)
    assert mixed_test.ci_contains_zero and mixed_test.p_value > 0.5
    assert lines[5] == (
        "| c | tandem-hybrid-zscore | 0.4900 | glue | 0.4900 | +0.0000 "
        f"| [{mixed_test.ci_low:+.4f}, {mixed_test.ci_high:+.4f}] "
        f"| {mixed_test.p_value:.3f} |"
    )
    assert best_peer_table((ahead, mixed, peer)) == lines  # fixed seeds: same report
    note = lines[-1]
    assert "paired" in note and "bootstrap" in note and "sign-flip" in note
    assert "10,000" in note and "CI contains 0" in note


def test_records_without_per_query_scores_show_dashes() -> None:
    glue = ok(SystemName.GLUE, 0.70, 12.0)
    lines = best_peer_table((*RESULTS, glue))
    assert "| c | tandem-hybrid | 0.7500 | glue | 0.7000 | +0.0500 | – | – |" in lines
    half = with_per_query(ok(SystemName.TANDEM_HYBRID, 0.0, 11.0), PEER_PER_QUERY)
    assert best_peer_table((half, glue))[4].endswith("| – | – |")


def test_an_old_results_line_without_per_query_scores_loads_and_renders() -> None:
    old_lines = [ok(SystemName.TANDEM_HYBRID, 0.75, 11.0), ok(SystemName.GLUE, 0.70, 12.0)]
    loaded = []
    for result in old_lines:
        data = json.loads(json.dumps(result.to_json()))
        del data["per_query_ndcg10"]  # written before the field existed
        loaded.append(SystemResult.from_json(data))
    assert [r.per_query_ndcg10 for r in loaded] == [{}, {}]
    lines = best_peer_table(loaded)
    assert "| c | tandem-hybrid | 0.7500 | glue | 0.7000 | +0.0500 | – | – |" in lines


def test_results_jsonl_carries_per_query_scores(tmp_path: Path) -> None:
    peer = with_per_query(ok(SystemName.GLUE, 0.0, 12.0), PEER_PER_QUERY)
    config = RunConfig(data_dirs=(tmp_path,), out_dir=tmp_path / "out")
    paths = write_report(RunReport(config, (peer,), (FLOOR,)), tmp_path / "out")
    line = json.loads(paths["jsonl"].read_text().splitlines()[0])
    assert line["per_query_ndcg10"] == PEER_PER_QUERY
    assert SystemResult.from_json(line) == peer
