"""``tandem cluster ...``: sharded corpora on Ray (needs the ``cluster`` extra).

A sharded corpus lives in a directory of its own (``ROOT``: ``cluster.json`` and one
engine directory per shard). Without ``--address`` each command starts a local Ray
cluster on 127.0.0.1 for its own duration (the shards start, answer, flush and stop);
with ``--address`` it joins a running cluster (``ray start --head`` printed the address),
and ``--detached`` keeps the shard actors running between commands until
``tandem cluster stop``. Ray, Ray Data and the engine's cluster code load only when a
``cluster`` command runs.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from engine import CorpusConfig, InvalidArgument
from engine.config import DEFAULT_MODEL
from engine.surfaces import render
from engine.surfaces.cli_args import (
    CommandError,
    FilterOpt,
    FusionChoice,
    FusionOpt,
    JsonOpt,
    LanguageOpt,
    NoVectorsOpt,
    QueryArg,
    TitleWeightOpt,
    TopKOpt,
    check_model_name,
    console,
    field_declarations,
)
from sparse import DEFAULT_TITLE_WEIGHT

_SHOWN_REJECTIONS = 20  # as `tandem add` shows

if TYPE_CHECKING:
    from engine.cluster import ShardedCorpus

cluster_app = typer.Typer(
    name="cluster",
    help="Sharded corpora on Ray: create, load, search, health, stop.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

RootArg = Annotated[
    Path,
    typer.Argument(help="The sharded corpus's directory.", metavar="ROOT", file_okay=False),
]
AddressOpt = Annotated[
    str | None,
    typer.Option(
        "--address",
        help="Ray cluster to join (host:port); default: a local cluster on 127.0.0.1.",
    ),
]
DetachedOpt = Annotated[
    bool,
    typer.Option("--detached", help="Shard actors outlive this command (needs --address)."),
]


def _connect(address: str | None, detached: bool) -> None:
    try:
        from engine.cluster import connect, start_local_cluster
    except ImportError as exc:
        raise CommandError(
            "tandem cluster needs the cluster extra: pip install 'tandem-search[cluster]'"
        ) from exc
    if detached and not address:
        raise CommandError("--detached needs --address (a local cluster ends with the command)")
    if address:
        connect(address)
    else:
        start_local_cluster()


@contextmanager
def _opened(
    root: Path, address: str | None, detached: bool, global_statistics: bool = False
) -> Iterator[ShardedCorpus]:
    _connect(address, detached)
    from engine.cluster import ClusterOptions, ShardedCorpus

    options = ClusterOptions(detached=detached, global_term_statistics=global_statistics)
    corpus = ShardedCorpus.open(root, options=options)
    try:
        yield corpus
    finally:
        corpus.close()


@cluster_app.command()
def create(
    root: RootArg,
    name: Annotated[str, typer.Option("--name", help="Corpus name.")],
    shards: Annotated[int, typer.Option("--shards", min=1, max=1024, help="Shard count.")],
    embedder: Annotated[
        str | None,
        typer.Option("--embedder", help="sentence-transformers model (default all-MiniLM-L6-v2)."),
    ] = None,
    no_vectors: NoVectorsOpt = False,
    field: Annotated[
        list[str] | None,
        typer.Option("--field", help="A filterable field, NAME:TYPE (keyword|integer|date)."),
    ] = None,
    fusion: FusionOpt = FusionChoice.RRF,
    title_weight: TitleWeightOpt = DEFAULT_TITLE_WEIGHT,
    placement: Annotated[
        str | None,
        typer.Option(
            "--placement",
            help="Comma-separated Ray custom resources, one per shard, pinning each shard "
            "to the node whose disk holds it.",
        ),
    ] = None,
    address: AddressOpt = None,
    detached: DetachedOpt = False,
) -> None:
    """Create a sharded corpus in ROOT and start its shards."""
    if embedder is not None and no_vectors:
        raise typer.BadParameter("choose at most one", param_hint="--embedder / --no-vectors")
    check_model_name(embedder)
    config = CorpusConfig.model_validate(
        {
            "name": name,
            "embedder": None if no_vectors else (embedder or DEFAULT_MODEL),
            "fields": field_declarations(field or []),
            "fusion": fusion.value,
            "title_weight": title_weight,
        }
    )
    _connect(address, detached)
    from engine.cluster import ClusterOptions, ShardedCorpus

    places = None if placement is None else [p.strip() for p in placement.split(",")]
    corpus = ShardedCorpus.create(
        root, config, shards, placement=places, options=ClusterOptions(detached=detached)
    )
    corpus.close()
    typer.echo(f"created {name!r} with {shards} shards in {root}")


class FileFormat(StrEnum):
    JSONL = "jsonl"
    PARQUET = "parquet"


@cluster_app.command()
def load(
    root: RootArg,
    files: Annotated[
        list[Path],
        typer.Argument(help="JSON Lines (plain or gzip) or Parquet files (or folders)."),
    ],
    file_format: Annotated[
        FileFormat | None,
        typer.Option("--format", help="The files' format (default: told by content)."),
    ] = None,
    embed_actors: Annotated[
        int, typer.Option("--embed-actors", min=1, help="Embedding actors (one CPU or GPU each).")
    ] = 2,
    batch_size: Annotated[int, typer.Option("--batch-size", min=1, max=10_000)] = 256,
    no_resume: Annotated[
        bool, typer.Option("--no-resume", help="Embed and write ids already stored, too.")
    ] = False,
    vector_column: Annotated[
        str | None, typer.Option("--vector-column", help="Column of precomputed vectors.")
    ] = None,
    embedding_model: Annotated[
        str | None,
        typer.Option("--embedding-model", help="Model that made --vector-column's vectors."),
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress.")] = False,
    address: AddressOpt = None,
    detached: DetachedOpt = False,
) -> None:
    """Load documents through Ray Data: read, embed on an actor pool, write to the shards."""
    import pyarrow as pa
    from ray.exceptions import RayTaskError

    from engine.cluster.ingest import ingest

    with _opened(root, address, detached) as corpus:
        try:
            report = ingest(
                corpus,
                [str(f) for f in files],
                file_format=None if file_format is None else file_format.value,
                embed_actors=embed_actors,
                batch_size=batch_size,
                resume=not no_resume,
                vector_column=vector_column,
                embedding_model=embedding_model,
                progress=not quiet,
            )
        except InvalidArgument:
            raise  # the engine's own refusal: reported as every command reports it
        except (pa.ArrowException, RayTaskError, ValueError, ImportError) as exc:
            # Files Ray Data cannot read as one table (Parquet files whose columns
            # disagree, say) or finds nothing to read in (an empty folder; it raises a
            # plain ValueError): one line, not a traceback. What was acknowledged stays.
            cause = exc.cause if isinstance(exc, RayTaskError) else exc
            raise CommandError(f"cannot load: {type(cause).__name__}: {cause}") from None
    typer.echo(
        f"written {report.written}, skipped {report.skipped} (already stored), "
        f"rejected {report.rejected}, {report.docs_per_s:.1f} docs/s"
    )
    shown = report.rejections[:_SHOWN_REJECTIONS]
    for reason in shown:
        typer.echo(f"rejected: {render.safe(reason, one_line=True)}", err=True)
    if report.rejected > len(shown):
        typer.echo(f"... and {report.rejected - len(shown)} more rejected rows", err=True)
    if report.rejected and not report.written + report.skipped:
        # Every row refused (a file of another format, say): a script must notice, as
        # after `tandem add`.
        raise typer.Exit(1)


@cluster_app.command()
def search(
    root: RootArg,
    query: QueryArg,
    top_k: TopKOpt = 10,
    language: LanguageOpt = None,
    filter_json: FilterOpt = None,
    global_statistics: Annotated[
        bool,
        typer.Option(
            "--global-term-statistics",
            help="Score keywords with document frequencies summed over the shards "
            "(one more round to the shards).",
        ),
    ] = False,
    as_json: JsonOpt = False,
    address: AddressOpt = None,
    detached: DetachedOpt = False,
) -> None:
    """Search a sharded corpus: the best passages for QUERY."""
    with _opened(root, address, detached, global_statistics) as corpus:
        passages = corpus.search(query, top_k=top_k, language_id=language, filters=filter_json)
    if as_json:
        typer.echo(render.passages_json(passages))
    else:
        render.print_passages(console(), passages)


@cluster_app.command()
def health(
    root: RootArg,
    as_json: JsonOpt = False,
    address: AddressOpt = None,
    detached: DetachedOpt = False,
) -> None:
    """Each shard: up or down, its process and node, its documents."""
    with _opened(root, address, detached) as corpus:
        infos = corpus.shard_info()
    rows = [
        {"shard": i, "up": info is not None}
        | (
            {}
            if info is None
            else {"pid": info.pid, "node": info.node_id, "documents": info.documents}
        )
        for i, info in enumerate(infos)
    ]
    if as_json:
        typer.echo(json.dumps(rows))
        return
    for row in rows:
        state = "up" if row["up"] else "DOWN"
        extra = "" if not row["up"] else f"  pid {row['pid']}  {row['documents']} documents"
        typer.echo(f"shard {row['shard']:3d}  {state}{extra}")
    up = sum(1 for r in rows if r["up"])
    typer.echo(f"{up}/{len(rows)} shards up")
    if up < len(rows):
        raise typer.Exit(1)


@cluster_app.command()
def stop(root: RootArg, address: Annotated[str, typer.Option("--address")]) -> None:
    """Stop the detached shard actors of ROOT (flushing each first)."""
    _connect(address, detached=True)
    from engine.cluster import stop_detached

    typer.echo(f"stopped {stop_detached(root)} shard actors")
