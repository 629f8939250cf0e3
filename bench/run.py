"""A benchmark run: for each corpus, cache its vectors, measure the query-embedding floor,
then run every selected system (each in its own process by default) and write the report."""

from __future__ import annotations

import logging
import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from tqdm import tqdm

from bench.dataset import BeirDataset, corpus_name, load_for_run, portable_path
from bench.encoder import DEFAULT_MODEL, EncoderBackend, SentenceEncoder
from bench.floor import fastest_backend, measure_floor
from bench.report import RunReport, write_report
from bench.results import CorpusFloor, SystemResult, skipped
from bench.runner import SystemJob, run_job
from bench.systems.base import SystemName
from bench.systems.registry import SPECS, missing_requirements
from bench.vector_cache import DEFAULT_CACHE_DIR, VectorCache

logger = logging.getLogger(__name__)

FIXTURE_DIR = Path(__file__).resolve().parent / "fixtures" / "tandem-help"


@dataclass(frozen=True, slots=True)
class RunConfig:
    """What to run. ``backend=None`` picks the fastest single-query runtime measured."""

    data_dirs: tuple[Path, ...] = (FIXTURE_DIR,)
    split: str | None = None
    """Judgements (``qrels/<split>.tsv``); None: ``bench.dataset``'s default."""
    drop_titles: bool = False
    """Score every collection without its titles (``BeirDataset.without_titles``)."""
    systems: tuple[SystemName, ...] = tuple(SystemName)
    out_dir: Path = Path("bench-results")
    cache_dir: Path = DEFAULT_CACHE_DIR
    model: str = DEFAULT_MODEL
    backend: EncoderBackend | None = None
    k_quality: int = 100
    k_latency: int = 10
    encode_subset: int = 500
    isolated: bool = True
    progress: bool = True
    floor_backends: tuple[EncoderBackend, ...] = field(
        default=(EncoderBackend.TORCH, EncoderBackend.ONNX)
    )

    def __post_init__(self) -> None:
        if not self.data_dirs:
            raise ValueError("at least one data directory is required")
        _refuse_shared_names(self.data_dirs)
        if not self.systems:
            raise ValueError("at least one system is required")
        if self.k_quality < 1 or self.k_latency < 1 or self.encode_subset < 1:
            raise ValueError("k_quality, k_latency and encode_subset must be >= 1")
        if self.k_quality < 100:
            raise ValueError("k_quality must be >= 100: Recall@100 is scored on that run")


def _refuse_shared_names(data_dirs: tuple[Path, ...]) -> None:
    """The report and results key every corpus by its folder's name
    (``bench.dataset.corpus_name``): two folders with one name would be merged into one
    section and mislabelled, so the run is refused before anything is measured."""
    seen: dict[str, Path] = {}
    for folder in data_dirs:
        name = corpus_name(folder)
        if name in seen:
            raise ValueError(
                f"two data directories share the corpus name {name!r}: {seen[name]} and "
                f"{folder} (results are keyed by the resolved folder name; rename one)"
            )
        seen[name] = folder


def run_benchmark(config: RunConfig) -> RunReport:
    """Run every (corpus, system) pair and write JSONL, Markdown and PNG into ``out_dir``."""
    results: list[SystemResult] = []
    floors: list[CorpusFloor] = []
    for data_dir in config.data_dirs:
        corpus_results, floor = _run_corpus(config, data_dir)
        results.extend(corpus_results)
        floors.append(floor)
    report = RunReport(config=config, results=tuple(results), floors=tuple(floors))
    write_report(report, config.out_dir)
    return report


def _run_corpus(config: RunConfig, data_dir: Path) -> tuple[list[SystemResult], CorpusFloor]:
    dataset = load_for_run(data_dir, config.split, config.drop_titles)
    runnable = [s for s in config.systems if not missing_requirements(s)]
    needs_model = any(SPECS[s].uses_model for s in runnable)
    encoders: dict[EncoderBackend, SentenceEncoder] = {}
    from_cache = True
    floor_ms: dict[str, float] = {}
    encoder_rate: float | None = None
    if needs_model:
        torch_encoder = SentenceEncoder(config.model, EncoderBackend.TORCH)
        encoders[EncoderBackend.TORCH] = torch_encoder
        _vectors, from_cache = VectorCache(config.cache_dir).get_or_compute(
            torch_encoder, dataset, progress=config.progress
        )
        backends = (config.backend,) if config.backend else config.floor_backends
        floor_ms = measure_floor(
            config.model,
            backends,
            [q.text for q in dataset.queries],
            config.cache_dir,
            loaded=encoders,
        )
        encoder_rate = encoder_throughput(torch_encoder, dataset, config.encode_subset)
    floor = CorpusFloor(
        dataset.name,
        floor_ms,
        vectors_from_cache=from_cache,
        encoder_docs_per_s=encoder_rate,
        dataset_path=portable_path(data_dir),
        split=dataset.split,
        self_indexed_queries=len(dataset.self_indexed),
    )
    backend = config.backend or fastest_backend(floor_ms)
    encoders.clear()  # free the parent's models before the systems run

    results: list[SystemResult] = []
    bar = tqdm(config.systems, desc=dataset.name, disable=not config.progress, unit="system")
    for name in bar:
        bar.set_postfix_str(name.value)
        missing = missing_requirements(name)
        if missing:
            results.append(
                skipped(dataset.name, name.value, f"not installed: {', '.join(missing)}")
            )
            continue
        job = SystemJob(
            data_dir=data_dir,
            split=dataset.split,
            drop_titles=config.drop_titles,
            corpus=dataset.name,
            system=name,
            model=config.model,
            backend=backend,
            cache_dir=config.cache_dir,
            k_quality=config.k_quality,
            k_latency=config.k_latency,
            encode_subset=config.encode_subset,
            isolated=config.isolated,
            encoder_docs_per_s=encoder_rate,
        )
        results.append(_dispatch(job))
    return results, floor


def encoder_throughput(encoder: SentenceEncoder, dataset: BeirDataset, n_docs: int) -> float:
    """Documents per second the raw encoder embeds (batch 32, torch), timed on ``n_docs``
    documents spread evenly over the corpus after a short warm-up: the embedding cost any
    system pays to ingest this corpus with this model, whichever library calls it."""
    sample = [d.full_text for d in dataset.spread_sample(n_docs)]
    encoder.encode(sample[:8])
    start = time.perf_counter()
    encoder.encode(sample)
    return len(sample) / (time.perf_counter() - start)


def _dispatch(job: SystemJob) -> SystemResult:
    if not job.isolated:
        return run_job(job)
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
        return pool.submit(run_job, job).result()
