"""The parts of ``Corpus.switch_embedder`` that need no corpus state.

The corpus swaps its own config, embedder and ingestor under its write lock; this module
holds what is left: the argument checks and the batch loop that re-embeds every degraded
document. (The new ``config.json`` is written first, with ``engine.config.save_config``,
so a crash part-way leaves a corpus that ``repair`` finishes.)
"""

from __future__ import annotations

from collections.abc import Callable

from tqdm import tqdm

from engine.config import CorpusConfig
from engine.errors import InvalidArgument
from engine.write.ingest import Ingestor


def check_switch(current: CorpusConfig, config: CorpusConfig, batch_size: int) -> None:
    """Refuse a switch that would rename the corpus, drop its embedder or change its
    declared fields, or a batch size outside 1..10000."""
    if config.name != current.name or config.embedder is None:
        raise InvalidArgument("switch_embedder needs this corpus's config with an embedder")
    if config.fields != current.fields:
        raise InvalidArgument("switch_embedder cannot change the declared filterable fields")
    if not 1 <= batch_size <= 10_000:
        raise InvalidArgument("batch_size must be in 1..10000")


def reembed_degraded(
    ingestor: Ingestor,
    total: int,
    batch_size: int,
    *,
    desc: str,
    show: bool,
    after_batch: Callable[[], None],
    on_progress: Callable[[int, int], None] | None,
) -> int:
    """Repair batches until ``total`` documents are done or a batch fails (after a failure
    the repair plan makes batches smaller); returns how many were re-embedded."""
    done = 0
    with tqdm(total=total, disable=not show, desc=desc) as bar:
        while done < total:
            n = ingestor.repair(batch_size)
            done += n
            bar.update(n)
            after_batch()
            if on_progress is not None:
                on_progress(done, total)
            if n == 0:  # the provider failed (a smaller batch may heal on the next pass)
                break
    return done
