"""The parts of ``Corpus.switch_embedder`` that need no corpus state.

The corpus swaps its own config, embedder and ingestor under its write lock; this module
holds what is left: the argument checks and the batch loop that re-embeds every degraded
document. (The new ``config.json`` is written first, with ``engine.config.save_config``,
so a crash part-way leaves a corpus that ``repair`` finishes.)
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

from tqdm import tqdm

from engine.config import CorpusConfig
from engine.errors import InvalidArgument
from engine.write.ingest import Ingestor


def check_switch(
    current: CorpusConfig, config: object, embedder: object, batch_size: object
) -> None:
    """Refuse, before anything is touched, a switch that would change more than the
    embedder (a name, the fields, the languages — which the keyword index was built
    with —, the fusion, ...), one without an embedder, or a batch size that is not an
    integer in 1..10000."""
    if not isinstance(config, CorpusConfig) or config.name != current.name:
        raise InvalidArgument("switch_embedder needs this corpus's config with an embedder")
    if config.embedder is None or not _is_embedder(embedder):
        raise InvalidArgument("switch_embedder needs an embedder; None turns vectors off")
    if config.fields != current.fields:
        raise InvalidArgument("switch_embedder cannot change the declared filterable fields")
    if config.model_copy(update={"embedder": current.embedder}) != current:
        raise InvalidArgument(
            "switch_embedder changes the embedder only; the rest of a corpus's config "
            "stays as it was created"
        )
    if not isinstance(batch_size, int) or isinstance(batch_size, bool):
        raise InvalidArgument("batch_size must be an integer in 1..10000")
    if not 1 <= batch_size <= 10_000:
        raise InvalidArgument("batch_size must be in 1..10000")


def _is_embedder(candidate: object) -> bool:
    """Whether ``candidate`` has ``dense.Embedder``'s members, looked up without running
    any: ``isinstance`` against the protocol reads its properties on Python 3.11, and an
    Ollama embedder's ``dimension`` asks the server — it raised while the server was down
    (the switch refused instead of leaving documents degraded to heal), waited while it
    was slow, and sent one more request while it was up."""
    for member in ("name", "dimension", "embed", "is_available"):
        try:
            inspect.getattr_static(candidate, member)
        except AttributeError:
            return False
    return True


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
