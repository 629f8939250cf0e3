"""The ``tandem`` command line: one engine directory, one question, one answer.

Exit codes: 0 success, 2 usage error (click's), 1 runtime error. Expected runtime errors
(the engine's, a missing file, ...) print one ``tandem: error: ...`` line on stderr and no
traceback; ``main`` maps them in one place. A reader that goes away (``tandem list | head
-1``) ends the command quietly with 0.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Annotated, Any, NoReturn

import pydantic
import typer
from typer.core import TyperGroup

from engine import (
    Corpus,
    CorpusConfig,
    EngineError,
    NaturalLanguage,
    OllamaEmbedding,
    SentenceTransformerEmbedding,
)
from engine.limits import MAX_GREP_MATCHES
from engine.surfaces import render
from engine.surfaces.bulk import AddStopped, BulkReport, add_all
from engine.surfaces.cli_args import DEFAULT_HOME as DEFAULT_HOME  # still importable here
from engine.surfaces.cli_args import (
    AnalyzerOpt,
    CommandError,
    CorpusArg,
    FilterOpt,
    FusionChoice,
    FusionOpt,
    JsonOpt,
    LanguageOpt,
    NoVectorsOpt,
    PathOpt,
    QueryArg,
    QueryEmbedTimeoutOpt,
    TitleWeightOpt,
    TopKOpt,
    check_model_name,
    check_source_id,
    console,
    existing_engine_home,
    field_declarations,
    language_analyzers,
    ollama_spec,
    open_corpus,
    open_engine,
)
from engine.surfaces.cluster_cli import cluster_app
from engine.surfaces.loaders import STDIN, DocumentFile
from engine.surfaces.progress import AddProgress, wants_progress
from sparse import DEFAULT_TITLE_WEIGHT


class _ReaderGone(Exception):
    """Standard output's reader went away: a ``BrokenPipeError`` that ``main`` must see."""


class _TandemGroup(TyperGroup):
    """Hands a broken pipe on to ``main``: click's own handler would exit 1 in silence.

    Help is printed while the context is made, a command's output while it is invoked
    (subcommands included), so the two cover every write a command makes.
    """

    # ``Any``: the context types are typer's vendored click's, which it does not export.
    def make_context(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().make_context(*args, **kwargs)
        except BrokenPipeError as exc:
            raise _ReaderGone from exc

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except BrokenPipeError as exc:
            raise _ReaderGone from exc


app = typer.Typer(
    cls=_TandemGroup,
    name="tandem",
    help="Tandem: hybrid keyword + vector search over local corpora.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain help: flags show no value placeholder ("--json", not "<bool>")
)

_OWN_LOGGERS = ("engine", "sparse", "dense", "fusion", "bench")


def _echo(text: str, *, err: bool = False) -> None:
    """``typer.echo`` on the streams ``main`` set up: left to choose, click writes UTF-8
    to an ASCII stdout's byte buffer, past the ``?`` that ``_tolerant_stdout`` promises."""
    typer.echo(text, file=sys.stderr if err else sys.stdout)


@app.callback()
def _root(
    path: PathOpt = None,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Log warnings and progress on stderr.")
    ] = False,
) -> None:
    """Tandem: hybrid keyword + vector search over local corpora."""
    # Third-party libraries (faiss's loader, httpx, ...) stay at WARNING even with -v:
    # their INFO lines read like failures to a new user.
    logging.basicConfig(
        level=logging.WARNING if verbose else logging.ERROR,
        format="tandem: %(levelname)s: %(name)s: %(message)s",
        stream=sys.stderr,
    )
    for name in _OWN_LOGGERS:
        logging.getLogger(name).setLevel(logging.INFO if verbose else logging.ERROR)
    if not verbose:
        # transformers draws a "Loading weights" bar on stderr at every model load, even
        # piped and with --quiet; it reads this when first imported (after this line).
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")


# -- corpora ------------------------------------------------------------------------------


@app.command()
def create(
    ctx: typer.Context,
    corpus: CorpusArg,
    embedder: Annotated[
        str | None,
        typer.Option(help="Sentence-transformers model (default: all-MiniLM-L6-v2)."),
    ] = None,
    ollama: Annotated[
        str | None, typer.Option(help="Embed with Ollama: HOST/MODEL.", metavar="HOST/MODEL")
    ] = None,
    no_vectors: NoVectorsOpt = False,
    ask_model: Annotated[
        str | None,
        typer.Option(
            help="Turn on `tandem ask` with this Ollama chat model: HOST/MODEL or MODEL.",
            metavar="HOST/MODEL",
        ),
    ] = None,
    field: Annotated[
        list[str] | None,
        typer.Option(
            "--field",
            help="Declare a filter field, NAME:TYPE with TYPE keyword, integer or date "
            "(repeat for several).",
            metavar="NAME:TYPE",
        ),
    ] = None,
    fusion: FusionOpt = FusionChoice.RRF,
    title_weight: TitleWeightOpt = DEFAULT_TITLE_WEIGHT,
    analyzer: AnalyzerOpt = None,
    path: PathOpt = None,
) -> None:
    """Create a corpus."""
    if sum((embedder is not None, ollama is not None, no_vectors)) > 1:
        raise typer.BadParameter(
            "choose at most one", param_hint="--embedder / --ollama / --no-vectors"
        )
    check_model_name(embedder)
    spec: SentenceTransformerEmbedding | OllamaEmbedding | None
    if no_vectors:
        spec = None
    elif ollama is not None:
        spec = ollama_spec(ollama)
    else:
        spec = SentenceTransformerEmbedding(model=embedder or SentenceTransformerEmbedding().model)
    natural = None
    if ask_model is not None:
        chat = ollama_spec(ask_model, "--ask-model")
        natural = NaturalLanguage(model=chat.model, host=chat.host)
    config = CorpusConfig.model_validate(
        {
            "name": corpus,
            "embedder": spec,
            "natural": natural,
            "fields": field_declarations(field or []),
            "fusion": fusion.value,  # a shorthand: "rrf" or "zscore" with its defaults
            "title_weight": title_weight,
            "languages": language_analyzers(analyzer or []),
        }
    )
    with open_engine(ctx, path, create=True) as engine:
        engine.create_corpus(config)
        home = engine.path
    kind = "keyword only" if spec is None else f"hybrid, embedder {spec.kind}:{spec.model}"
    if config.fusion.kind != "rrf":
        kind += f", fusion {config.fusion.kind}"
    if title_weight != DEFAULT_TITLE_WEIGHT:
        kind += f", title weight {title_weight}"
    if config.languages:
        kind += ", analyzers " + ", ".join(f"{k}:{v}" for k, v in config.languages.items())
    if config.fields:
        kind += ", fields " + ", ".join(f"{k}:{v.value}" for k, v in config.fields.items())
    if natural is not None:
        kind += f", questions with {natural.model}"
    _echo(f"created corpus {corpus} ({kind}) in {home}")


@app.command("list")
def list_(ctx: typer.Context, path: PathOpt = None) -> None:
    """List the corpora in the engine directory."""
    with open_engine(ctx, path) as engine:
        for name in engine.list_corpora():
            _echo(name)


@app.command()
def add(
    ctx: typer.Context,
    corpus: CorpusArg,
    file: Annotated[
        str,  # not a Path: ``Path("./-")`` prints as "-", the name of standard input
        typer.Argument(
            help="JSON Lines (or BEIR corpus.jsonl), optionally gzipped, or a JSON array of "
            "documents; - (or a pipe, /dev/stdin) reads standard input (./- is a file).",
            metavar="FILE",
        ),
    ],
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="No progress line, even on a terminal.")
    ] = False,
    path: PathOpt = None,
) -> None:
    """Add or update documents from a JSON Lines file; bad lines are rejected one by one.

    On a terminal a progress line shows documents stored (and embedded), the rate and
    the time left (how far through, for a file of known size); none is drawn when stderr
    is not a terminal or with --quiet.
    """
    if file != STDIN:
        if Path(file).is_dir():
            raise CommandError(
                f"{file} is a directory; give one JSON Lines file (.jsonl, .jsonl.gz), "
                "a JSON array (.json) or - for standard input"
            )
        if not Path(file).exists():
            raise CommandError(f"no such file: {file}")
    with open_corpus(ctx, path, corpus) as target:
        source = DocumentFile(file, fields=target.config.fields)
        report = BulkReport()  # the running tally, also when the add does not finish
        try:
            _add_with_progress(target, source, corpus, report, quiet=quiet)
        except AddStopped as stopped:
            _print_report(report)  # what was stored before the error
            raise CommandError(str(stopped)) from None
        except KeyboardInterrupt:
            report.finish()
            _print_report(report)
            _echo(
                "interrupted: the documents counted were stored (the batch being written "
                "when it stopped may be too); adding the same file again is safe (writes "
                "are upserts)",
                err=True,
            )
            raise typer.Exit(130) from None
    _print_report(report)
    if report.degraded:
        _echo(
            f"{report.degraded} documents are keyword-searchable only until the embedder "
            f"answers ({_WHY_DOWN}); run 'tandem repair {corpus}' then",
            err=True,
        )
    if report.rejected_total and not report.added + report.updated:
        # Every line refused (a file of another format, say): a script must notice.
        raise typer.Exit(1)


_WHY_DOWN = "'tandem -v' shows why"


def _print_report(report: BulkReport) -> None:
    summary, reasons = render.bulk_summary(report)
    _echo(summary)
    if reasons:
        _echo(reasons, err=True)


def stored_and_embedded(report: BulkReport) -> tuple[int, int]:
    """What the progress line counts: documents stored, and of those the ones holding a
    vector. ``unchanged`` documents (vector re-used) are among the ``updated`` already."""
    stored = report.added + report.updated
    return stored, stored - report.degraded


def _add_with_progress(
    target: Corpus, source: DocumentFile, name: str, report: BulkReport, *, quiet: bool
) -> None:
    if not wants_progress(sys.stderr, quiet=quiet):
        add_all(target, source, report=report)
        return
    bar = AddProgress(
        sys.stderr, f"adding to {name}", source.size, vectors=target.config.vectors_enabled
    )
    bar.update(0, 0, 0, force=True)

    def draw(tally: BulkReport, *, final: bool = False) -> None:
        (bar.finish if final else bar.update)(source.progress(), *stored_and_embedded(tally))

    add_all(target, source, on_batch=draw, report=report)
    draw(report, final=True)


# -- reading --------------------------------------------------------------------------------


@app.command()
def search(
    ctx: typer.Context,
    corpus: CorpusArg,
    query: QueryArg,
    top_k: TopKOpt = 10,
    language: LanguageOpt = None,
    filter_json: FilterOpt = None,
    as_json: JsonOpt = False,
    path: PathOpt = None,
) -> None:
    """Search a corpus: the best passages for QUERY."""
    with open_corpus(ctx, path, corpus) as target:
        passages = target.search(query, top_k=top_k, language_id=language, filters=filter_json)
    if as_json:
        _echo(render.passages_json(passages))
    else:
        render.print_passages(console(), passages)


@app.command()
def fetch(
    ctx: typer.Context,
    corpus: CorpusArg,
    source_id: Annotated[
        str, typer.Argument(help="Source id.", metavar="SOURCE_ID", callback=check_source_id)
    ],
    as_json: JsonOpt = False,
    path: PathOpt = None,
) -> None:
    """Print the full text of one source (capped)."""
    with open_corpus(ctx, path, corpus) as target:
        source = target.fetch_source(source_id)
    _echo(render.source_json(source) if as_json else render.source_text(source))
    if source.truncated and not as_json:
        _echo("(text truncated at the fetch cap)", err=True)


@app.command()
def grep(
    ctx: typer.Context,
    corpus: CorpusArg,
    pattern: Annotated[
        str, typer.Argument(help="Regular expression (or text, with --fixed).", metavar="PATTERN")
    ],
    limit: Annotated[
        int, typer.Option(min=1, max=MAX_GREP_MATCHES, help="At most this many matches.")
    ] = 20,
    fixed: Annotated[bool, typer.Option("--fixed", help="PATTERN is plain text.")] = False,
    as_json: JsonOpt = False,
    path: PathOpt = None,
) -> None:
    """Exact or regex matches in the stored text (unranked; for scripts and agents)."""
    with open_corpus(ctx, path, corpus) as target:
        matches = target.grep(pattern, limit, fixed=fixed)
    if as_json:
        _echo(render.grep_json(matches))
    elif matches:
        _echo(render.grep_lines(matches))


@app.command()
def ask(
    ctx: typer.Context,
    corpus: CorpusArg,
    question: Annotated[
        str, typer.Argument(help="A question in plain language.", metavar="QUESTION")
    ],
    as_json: JsonOpt = False,
    path: PathOpt = None,
) -> None:
    """Ask a natural-language question (needs a local Ollama model)."""
    with open_corpus(ctx, path, corpus) as target:
        if target.config.natural is None:
            raise CommandError(
                f"natural-language questions are off for corpus {corpus!r}; they are chosen "
                f"when a corpus is created: tandem create NAME --ask-model MODEL (a local "
                f"Ollama chat model, e.g. llama3.2)"
            )
        answer = target.ask(question, user="cli")
    passages = list(answer.passages)
    interpretation = answer.interpretation.to_dict()
    if as_json:
        passages_out = json.loads(render.passages_json(passages))["passages"]
        _echo(render.to_json({"interpretation": interpretation, "passages": passages_out}))
    else:
        # Resolved values come from stored documents (other writers'): shown inert.
        understood = json.dumps(interpretation, ensure_ascii=False)
        _echo(f"understood as: {render.safe(understood, one_line=True)}")
        render.print_passages(console(), passages)


# -- housekeeping ---------------------------------------------------------------------------


@app.command()
def stats(
    ctx: typer.Context, corpus: CorpusArg, as_json: JsonOpt = False, path: PathOpt = None
) -> None:
    """Documents, degraded documents, embedder status and index sizes."""
    with open_corpus(ctx, path, corpus) as target:
        state = target.stats()
        if state["embedder_up"]:
            # A local model says it is up until a load has failed in this process: load
            # it (the query path), so the status printed is the model's, not "not tried
            # yet". (Ollama's check already asked the server; a down one is not waited on.)
            target._warm_up()
            state = target.stats()
        natural = target.config.natural
        questions = None if natural is None else natural.model
        numbers = {**render.stats_view(state), "questions": questions}
    if as_json:
        _echo(render.to_json({"corpus": corpus, **numbers}))
    else:
        _echo(render.stats_lines(corpus, numbers))


@app.command()
def repair(ctx: typer.Context, corpus: CorpusArg, path: PathOpt = None) -> None:
    """Re-embed degraded documents (while the embedder answers)."""
    with open_corpus(ctx, path, corpus) as target:
        healed = target.repair()
        stats = target.stats()
    left = stats.get("degraded", 0)
    _echo(f"re-embedded {healed} documents; {left} still degraded")
    if left and not stats.get("embedder_up"):
        _echo(f"the embedder is not answering ({_WHY_DOWN})", err=True)


@app.command("serve-metrics")
def serve_metrics(
    ctx: typer.Context,
    port: Annotated[int, typer.Option(min=0, max=65535, help="0 picks a free port.")] = 9464,
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    path: PathOpt = None,
) -> None:
    """Serve Prometheus metrics over HTTP until Ctrl-C or SIGTERM."""
    with open_engine(ctx, path) as engine:  # every scrape covers every corpus
        try:
            handle = engine.serve_metrics(host=host, port=port)
        except OSError as exc:  # worded as `tandem serve` words it
            raise CommandError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
        try:
            _echo(f"serving metrics at {handle.url}")
            _wait_for_stop_signal()
        finally:
            handle.stop()


def _wait_for_stop_signal() -> None:
    stop = threading.Event()
    previous = {
        sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)
    }
    try:
        while not stop.wait(1.0):
            pass
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@app.command()
def serve(
    ctx: typer.Context,
    host: Annotated[
        str, typer.Option(help="Interface to listen on (0.0.0.0 exposes it to the network).")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="0 picks a free port.")] = 8000,
    workers: Annotated[int, typer.Option(min=1, max=64, help="Worker processes.")] = 1,
    token_file: Annotated[
        Path | None,
        typer.Option(
            "--token-file",
            help="File holding the API token that writes need (else $TANDEM_API_TOKEN; "
            "without one, writes are refused).",
            dir_okay=False,
            metavar="PATH",
        ),
    ] = None,
    query_embed_timeout: QueryEmbedTimeoutOpt = None,
    path: PathOpt = None,
) -> None:
    """Serve the HTTP API (/v1), the search page (/), /metrics and health checks.

    Runs until Ctrl-C or SIGTERM. Reads are public and see public documents only;
    writes need Authorization: Bearer <token>.
    """
    from engine.surfaces.http.serve import serve_http  # lazy: uvicorn and FastAPI
    from engine.surfaces.http.settings import ServerSettings

    home = existing_engine_home(ctx, path)
    settings = ServerSettings(
        home=home.resolve(),
        token_file=None if token_file is None else token_file.resolve(),
        query_embed_timeout_s=query_embed_timeout,
    )
    serve_http(
        settings,
        host=host,
        port=port,
        workers=workers,
        announce=_announce,
    )


def _announce(line: str) -> None:
    _echo(line)
    sys.stdout.flush()  # a supervisor reading our stdout sees the address at once


@app.command()
def mcp(
    ctx: typer.Context, query_embed_timeout: QueryEmbedTimeoutOpt = None, path: PathOpt = None
) -> None:
    """Serve the corpora to an agent over MCP (stdio)."""
    from engine.surfaces.mcp_server import serve_stdio  # lazy: the SDK is heavy

    home = existing_engine_home(ctx, path)
    serve_stdio(home, query_embed_timeout=query_embed_timeout)


# Sharded corpora on Ray: the commands live in their own module (Ray loads only when one runs).
app.add_typer(cluster_app)


# -- entry point ----------------------------------------------------------------------------


def _message(exc: BaseException) -> str:
    if isinstance(exc, pydantic.ValidationError):
        return "; ".join(_located(e["loc"], str(e["msg"])) for e in exc.errors())
    if isinstance(exc, OSError) and exc.strerror and exc.filename:
        return f"{exc.strerror}: {exc.filename}"
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


def _located(loc: tuple[int | str, ...], message: str) -> str:
    """A pydantic error with the setting it is about: ``model: String should have ...``."""
    return f"{'.'.join(map(str, loc))}: {message}" if loc else message


def _reader_gone() -> NoReturn:
    """The reader of our output went away (``| head``): nothing to report, nothing failed.
    ``os._exit``: flushing what stdout still buffers would only raise again at exit."""
    with contextlib.suppress(OSError):
        sys.stderr.close()  # what stderr buffers still goes out (unless it is the pipe)
    os._exit(0)


def _fail(message: str) -> NoReturn:
    print(f"tandem: error: {message}", file=sys.stderr)
    sys.exit(1)


def _tolerant_stdout() -> None:
    """Characters stdout's encoding cannot represent (``PYTHONIOENCODING=ascii``, a
    Latin-1 locale) are printed as replacement characters, not a ``UnicodeEncodeError``
    traceback half-way through a table."""
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(errors="replace")


def main() -> None:
    """Console-script entry point."""
    _tolerant_stdout()
    try:
        app(prog_name="tandem")
    except (_ReaderGone, BrokenPipeError):
        _reader_gone()
    except (CommandError, EngineError, OSError, pydantic.ValidationError) as exc:
        _fail(_message(exc))


if __name__ == "__main__":  # pragma: no cover
    main()
