"""``python -m bench passages`` on a tiny BEIR folder written here, with the real model:
truncation counted by the tokenizer, windows per document, the z-score weight chosen on
the training judgements, and result files that name no absolute path."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from bench.cli import main
from bench.passages import RECIPES, SPLIT, TRUNCATE, WEIGHT_GRID

pytest.importorskip("sentence_transformers")

TOPICS = ("glacier ice melt", "protein folding", "solar wind", "coral reef", "neural spikes")


def _write_folder(root: Path) -> Path:
    folder = root / "tiny"
    (folder / "qrels").mkdir(parents=True)
    docs = []
    for i, topic in enumerate(TOPICS):
        # A long document (~330 words) whose topic is only named in its tail, and a short one.
        filler = " ".join(
            f"background sentence number {k} about general matters." for k in range(60)
        )
        docs.append({"_id": f"long{i}", "title": "", "text": f"{filler} This study is on {topic}."})
        docs.append({"_id": f"short{i}", "title": f"On {topic}", "text": f"A note on {topic}."})
    (folder / "corpus.jsonl").write_text("\n".join(json.dumps(d) for d in docs), encoding="utf-8")
    queries = [{"_id": f"q{i}", "text": f"what is known about {t}"} for i, t in enumerate(TOPICS)]
    (folder / "queries.jsonl").write_text(
        "\n".join(json.dumps(q) for q in queries[:3]), encoding="utf-8"
    )
    (folder / "queries.full.jsonl").write_text(
        "\n".join(json.dumps(q) for q in queries), encoding="utf-8"
    )
    test = [f"q{i}\tlong{i}\t1" for i in range(3)]
    train = [f"q{i}\tlong{i}\t1" for i in range(3, 5)]
    (folder / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "\n".join(test), encoding="utf-8"
    )
    (folder / "qrels" / "train.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "\n".join(train), encoding="utf-8"
    )
    return folder


@pytest.mark.timeout(600)
def test_passages_run_on_a_tiny_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = _write_folder(tmp_path)
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out"
    assert main(["passages", "--data", str(folder), "--out", str(out), "--cache", "cache"]) == 0
    record = json.loads((out / "passages.json").read_text(encoding="utf-8"))
    assert len(record["revision"]) == 40
    [result] = record["corpora"]
    assert result["corpus"] == "tiny" and result["docs"] == 10 and result["queries"] == 3
    assert result["truncated_docs"] == 5  # the five long documents, by the tokenizer
    for recipe in SPLIT:
        assert result[f"{recipe.label}_windows_per_doc"] > 1.4  # long ones: 2+ windows
        # A ratio of two timings: present and finite, never compared with a number (the
        # 2-core CI machine's timings are noise at ten documents).
        assert math.isfinite(result[f"{recipe.label}_encode_ratio"])
        assert result[f"{recipe.label}_encode_ratio"] > 0
    for recipe in RECIPES:
        row = result[recipe.label]
        assert set(row["train_ndcg_by_weight"]) == {str(w) for w in WEIGHT_GRID}
        assert row["zscore_weight"] in WEIGHT_GRID
        for arm in ("dense", "rrf", "zscore"):
            assert 0.0 <= row[arm]["ndcg@10"] <= 1.0
    # The topic sits past MiniLM's 256 word pieces: truncated, the vector arm cannot see it.
    for recipe in SPLIT:
        dense = result[recipe.label]["dense"]["ndcg@10"]
        assert dense > result[TRUNCATE.label]["dense"]["ndcg@10"], recipe.label
    text = (out / "passages.json").read_text(encoding="utf-8")
    assert str(tmp_path) not in text and result["data"] == "tiny"
    assert "| tiny | 10 |" in (out / "passages.md").read_text(encoding="utf-8")
