"""Retrieval quality through ``ir-measures`` (pytrec_eval underneath), never hand-written.

Conventions: ``nDCG@10`` with graded gains as in the qrels, ``R@100`` and ``RR@10`` (MRR@10)
with any grade >= 1 relevant. A run lists ranked document ids; scores handed to the
evaluator are derived from rank so ties cannot reorder a system's answer. Every judged
query counts: a query a system answered with nothing scores 0 instead of being dropped
from the mean (pytrec_eval alone would silently average over answered queries only).
The per-query nDCG@10 is kept beside the means, so two systems can be compared query by
query on the same queries (``bench.significance``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import ir_measures
from ir_measures import RR, R, nDCG

from bench.dataset import Qrels

MEASURES = {"ndcg@10": nDCG @ 10, "recall@100": R @ 100, "mrr@10": RR @ 10}
"""Report key → ir-measures measure object."""

Run = Mapping[str, Sequence[str]]
"""query id → ranked document ids, best first."""


@dataclass(frozen=True, slots=True)
class Quality:
    ndcg_at_10: float
    recall_at_100: float
    mrr_at_10: float
    per_query_ndcg_at_10: Mapping[str, float] = field(default_factory=dict, hash=False)
    """query id → nDCG@10 for every judged query (0 for a query left unanswered); its mean
    is ``ndcg_at_10``."""

    def as_dict(self) -> dict[str, float]:
        return {
            "ndcg@10": self.ndcg_at_10,
            "recall@100": self.recall_at_100,
            "mrr@10": self.mrr_at_10,
        }


def evaluate(qrels: Qrels, run: Run) -> Quality:
    """Mean of each measure over every query in ``qrels`` (missing answers score 0)."""
    judged = {qid: docs for qid, docs in qrels.items() if any(g > 0 for g in docs.values())}
    if not judged:
        raise ValueError("qrels hold no relevant document")
    scored_run = {
        qid: {doc_id: float(len(ranked) - rank) for rank, doc_id in enumerate(_dedup(ranked))}
        for qid, ranked in run.items()
        if qid in judged and ranked
    }
    per_query = {key: dict.fromkeys(judged, 0.0) for key in MEASURES}
    by_measure = {measure: key for key, measure in MEASURES.items()}
    if scored_run:
        for metric in ir_measures.iter_calc(list(MEASURES.values()), judged, scored_run):
            per_query[by_measure[metric.measure]][metric.query_id] = float(metric.value)
    n = len(judged)
    return Quality(
        ndcg_at_10=sum(per_query["ndcg@10"].values()) / n,
        recall_at_100=sum(per_query["recall@100"].values()) / n,
        mrr_at_10=sum(per_query["mrr@10"].values()) / n,
        per_query_ndcg_at_10=per_query["ndcg@10"],
    )


def rounded(per_query: Mapping[str, float], digits: int = 6) -> dict[str, float]:
    """Per-query values rounded for a result record (keeps ``results.jsonl`` small)."""
    return {query_id: round(value, digits) for query_id, value in per_query.items()}


def _dedup(ranked: Sequence[str]) -> list[str]:
    seen: set[str] = set()
    out: list[str] = []
    for doc_id in ranked:
        if doc_id not in seen:
            seen.add(doc_id)
            out.append(doc_id)
    return out
