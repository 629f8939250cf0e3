"""End to end: ``python -m bench`` on a tiny BEIR folder with real components."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench.cli import main
from bench.dataset import load_beir
from bench.run import FIXTURE_DIR
from tests.bench.tiny_beir import write_beir

REPO = Path(__file__).resolve().parents[2]


def read_lines(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


def test_python_m_bench_isolated_cheap_systems(tiny_beir: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench",
            "--data",
            str(tiny_beir),
            "--systems",
            "tantivy,bm25s",
            "--out",
            str(out),
            "--cache",
            str(tmp_path / "cache"),
            "--no-progress",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = read_lines(out)
    assert [(x["corpus"], x["system"], x["status"]) for x in lines] == [
        ("tiny", "tantivy", "ok"),
        ("tiny", "bm25s", "ok"),
    ]
    for line in lines:
        assert isinstance(line["revision"], str) and line["revision"]
        assert line["n_queries"] == 4 and line["n_docs"] == 6
        assert 0.0 < float(line["ndcg_at_10"]) <= 1.0
        assert float(line["peak_rss_mib"]) > 10
        assert float(line["p95_ms"]) >= float(line["p50_ms"]) > 0
        per_query = line["per_query_ndcg10"]
        assert set(per_query) == {"q1", "q2", "q3", "q4"}  # the judged queries (q5: none)
        mean = sum(per_query.values()) / len(per_query)
        assert mean == pytest.approx(float(line["ndcg_at_10"]), abs=1e-6)
    assert "| tantivy |" in (out / "results.md").read_text()
    assert "| tantivy |" in done.stdout
    assert (out / "results.png").read_bytes()[:4] == b"\x89PNG"


def run_in_process(tiny_beir: Path, tmp_path: Path, systems: str, *extra: str) -> Path:
    """``python -m bench`` in this process over the tiny corpus; the output folder."""
    out = tmp_path / "out"
    args = ["--data", str(tiny_beir), "--systems", systems, *extra, "--in-process"]
    args += ["--out", str(out), "--cache", str(tmp_path / "cache"), "--no-progress"]
    assert main(args) == 0
    return out


def test_in_process_run_with_vectors_and_floor(
    tiny_beir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = run_in_process(tiny_beir, tmp_path, "faiss-flat", "--backend", "torch")
    lines = {x["system"]: x for x in read_lines(out)}
    faiss_line = lines["faiss-flat"]
    assert faiss_line["status"] == "ok"
    assert faiss_line["peak_rss_mib"] is None  # shared process: no per-system peak
    assert faiss_line["query_embedding_p50_ms"].keys() == {"torch"}
    # end-to-end ingest adds the corpus's embedding time at the measured encoder rate
    rate, n = faiss_line["encoder_docs_per_s"], faiss_line["n_docs"]
    assert rate > 0
    assert faiss_line["ingest_e2e_docs_per_s"] == pytest.approx(
        n / (faiss_line["ingest_s"] + n / rate)
    )
    assert not any(p.startswith("/") for p in faiss_line["config"]["data_dirs"])
    assert float(faiss_line["recall_at_100"]) == 1.0
    assert list((tmp_path / "cache" / "vectors").glob("*.npy"))  # corpus vectors cached
    assert "query-embedding floor p50" in capsys.readouterr().out


def test_tandem_hybrid_ingest_is_charged_as_the_peers_are(tiny_beir: Path, tmp_path: Path) -> None:
    out = run_in_process(tiny_beir, tmp_path, "tandem-hybrid", "--backend", "torch")
    line = {x["system"]: x for x in read_lines(out)}["tandem-hybrid"]
    assert line["status"] == "ok"
    extra = line["extra"]
    # its own add over the raw encoder, both timed in its process on the same documents
    assert extra["ingest_over_encoder"] == pytest.approx(
        extra["own_encoding_ingest_docs_per_s"] / extra["raw_encoder_docs_per_s"]
    )
    # the headline: the peers' formula — its index time plus the corpus's embedding time
    # at the parent's encoder rate (not that rate times the ratio above: a second formula)
    documents = line["ingest_docs_per_s"] * line["ingest_s"]
    assert line["ingest_e2e_docs_per_s"] == pytest.approx(
        documents / (line["ingest_s"] + documents / line["encoder_docs_per_s"])
    )


def test_bad_arguments_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--data", str(tmp_path / "missing"), "--systems", "tantivy"]) == 2
    assert "not a directory" in capsys.readouterr().err
    assert main(["--systems", "nope"]) == 2


def test_two_data_folders_with_one_name_are_refused_naming_both(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Results are keyed by the folder's name: a/edge and b/edge would merge into one section.
    first, second = write_beir(tmp_path / "a" / "edge"), write_beir(tmp_path / "b" / "edge")
    out = tmp_path / "out"
    args = ["--data", str(first), str(second), "--systems", "tantivy", "--out", str(out)]
    assert main([*args, "--in-process", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "'edge'" in err and str(first) in err and str(second) in err
    assert "Traceback" not in err
    assert not out.exists()  # refused before anything ran


def test_the_shipped_fixture_is_a_valid_graded_beir_folder() -> None:
    data = load_beir(FIXTURE_DIR)
    assert 300 <= len(data.documents) <= 500
    assert 40 <= len(data.queries) <= 60
    grades = {g for judged in data.qrels.values() for g in judged.values()}
    assert grades == {1, 2}
    assert sum(p.stat().st_size for p in FIXTURE_DIR.rglob("*") if p.is_file()) < 300_000


def test_keyword_ratio_is_timed_against_tantivy_in_the_same_process(
    tiny_beir: Path, tmp_path: Path
) -> None:
    out = run_in_process(tiny_beir, tmp_path, "tandem-keyword,tantivy")
    keyword = {x["system"]: x for x in read_lines(out)}["tandem-keyword"]
    extra = keyword["extra"]
    assert extra["interleaved_p50_ms"] > 0 and extra["interleaved_tantivy_p50_ms"] > 0
    assert extra["over_tantivy"] == pytest.approx(
        extra["interleaved_p50_ms"] / extra["interleaved_tantivy_p50_ms"]
    )
    assert (
        "tandem-keyword p50 / tantivy p50 (interleaved, same process)"
        in (out / "results.md").read_text()
    )


def test_a_query_indexed_as_a_document_is_scored_without_it_and_the_split_is_recorded(
    tmp_path: Path,
) -> None:
    root = write_beir(tmp_path / "beir")
    own = {"_id": "q2", "title": "", "text": "forgot my password"}  # as ArguAna, Quora
    with (root / "corpus.jsonl").open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(own) + "\n")
    (root / "qrels" / "test.tsv").rename(root / "qrels" / "dev.tsv")
    out = run_in_process(root, tmp_path, "bm25s")
    line = read_lines(out)[0]
    # the exact copy of q2 ranks first for BM25; left out, the judged t1 is first
    assert line["per_query_ndcg10"]["q2"] == 1.0
    assert line["dataset"]["judgements"] == "dev"
    assert line["dataset"]["self_indexed_queries"] == 1
    markdown = (out / "results.md").read_text()
    assert "Scored with the `dev` judgements" in markdown
    assert "1 query is itself a document of the corpus" in markdown


def test_drop_titles_scores_every_system_on_the_bare_collection(
    tiny_beir: Path, tmp_path: Path
) -> None:
    out = run_in_process(tiny_beir, tmp_path, "tandem-keyword,bm25s", "--drop-titles")
    lines = read_lines(out)
    assert {x["corpus"] for x in lines} == {"tiny-notitle"}
    assert {x["system"] for x in lines} == {"tandem-keyword", "bm25s"}
    assert all(x["status"] == "ok" and x["config"]["drop_titles"] for x in lines)
    assert "## tiny-notitle" in (out / "results.md").read_text()
