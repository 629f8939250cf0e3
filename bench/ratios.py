"""The ratios the targets are stated in, derived from one corpus's results."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from bench.results import CorpusFloor, Status, SystemResult
from bench.systems.base import SystemName

HYBRIDS = (
    SystemName.TANDEM_HYBRID,
    SystemName.TANDEM_HYBRID_ZSCORE,
    SystemName.TANDEM_HYBRID_WINDOWS,
    SystemName.GLUE,
    SystemName.LANCEDB_HYBRID,
    SystemName.TXTAI_HYBRID,
)


@dataclass(frozen=True, slots=True)
class CorpusRatios:
    """``None`` wherever a needed system did not run.

    - ``hybrid_over_floor``: each hybrid system's p50 / query-embedding p50 (target ≤ 1.10
      for Tandem), from the interleaved pass (search and embedding in alternating blocks in the
      system's own process) when it ran, else from the separate p50s.
    - ``keyword_over_tantivy``: Tandem keyword p50 / raw tantivy p50 (target ≤ 1.5), from
      the interleaved pass (both over the same documents, alternating blocks in Tandem
      keyword's process) when it ran, else from the separate p50s.
    - ``ingest_over_encoder``: Tandem hybrid ingest with its own encoding / raw encoder
      throughput on the same subset (target ≥ 0.9).
    - ``hybrid_gain``: Tandem hybrid nDCG@10 minus the best single arm (Tandem keyword,
      FAISS flat on the same vectors) (target ≥ +0.01).
    """

    corpus: str
    floor_ms: float | None
    hybrid_over_floor: dict[str, float]
    paired: frozenset[str]
    keyword_over_tantivy: float | None
    ingest_over_encoder: float | None
    hybrid_gain: float | None
    zscore_gain: float | None = None
    """As ``hybrid_gain``, for Tandem hybrid with ``fusion="zscore"``."""
    keyword_paired: bool = False
    """``keyword_over_tantivy`` came from the interleaved pass in Tandem keyword's process."""
    paired_p50s: dict[str, tuple[float, float]] = field(default_factory=dict)
    """Per system in ``paired``: (its p50, the encoder's p50), both ms, from that pass:
    the two numbers ``hybrid_over_floor`` divides (the encoder timed in the system's own
    process, which reads other than ``floor_ms``, timed in a process of its own)."""


def _ok(results: Sequence[SystemResult]) -> dict[str, SystemResult]:
    return {r.system: r for r in results if r.status is Status.OK}


def compute_ratios(floor: CorpusFloor, results: Sequence[SystemResult]) -> CorpusRatios:
    ok = _ok([r for r in results if r.corpus == floor.corpus])
    floor_ms = floor.floor_ms
    over_floor: dict[str, float] = {}
    paired_systems: set[str] = set()
    paired_p50s: dict[str, tuple[float, float]] = {}
    for name in HYBRIDS:
        hit = ok.get(name.value)
        if hit is None:
            continue
        paired = hit.extra.get("over_embedding")
        if paired is not None:
            over_floor[name.value] = paired
            paired_systems.add(name.value)
            ours, encoder = (
                hit.extra.get("interleaved_p50_ms"),
                hit.extra.get("interleaved_embedding_p50_ms"),
            )
            if ours is not None and encoder is not None:
                paired_p50s[name.value] = (ours, encoder)
        elif hit.p50_ms is not None and floor_ms:
            over_floor[name.value] = hit.p50_ms / floor_ms

    keyword = ok.get(SystemName.TANDEM_KEYWORD.value)
    tantivy = ok.get(SystemName.TANTIVY.value)
    kw_ratio = None if keyword is None else keyword.extra.get("over_tantivy")
    keyword_paired = kw_ratio is not None
    if kw_ratio is None and keyword and tantivy and keyword.p50_ms is not None and tantivy.p50_ms:
        kw_ratio = keyword.p50_ms / tantivy.p50_ms

    hybrid = ok.get(SystemName.TANDEM_HYBRID.value)
    ingest = hybrid.extra.get("ingest_over_encoder") if hybrid else None

    arms = [ok.get(SystemName.TANDEM_KEYWORD.value), ok.get(SystemName.FAISS_FLAT.value)]
    arm_scores = [a.ndcg_at_10 for a in arms if a is not None and a.ndcg_at_10 is not None]

    def gain_of(system: SystemResult | None) -> float | None:
        if system is None or system.ndcg_at_10 is None or len(arm_scores) != 2:
            return None
        return system.ndcg_at_10 - max(arm_scores)

    gain = gain_of(hybrid)
    return CorpusRatios(
        corpus=floor.corpus,
        floor_ms=floor_ms,
        hybrid_over_floor=over_floor,
        paired=frozenset(paired_systems),
        paired_p50s=paired_p50s,
        keyword_over_tantivy=kw_ratio,
        keyword_paired=keyword_paired,
        ingest_over_encoder=ingest,
        hybrid_gain=gain,
        zscore_gain=gain_of(ok.get(SystemName.TANDEM_HYBRID_ZSCORE.value)),
    )
