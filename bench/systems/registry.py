"""Which systems exist, what each needs installed, and how to build one."""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from bench.errors import SystemUnavailable
from bench.systems.base import BenchSystem, SystemContext, SystemName


@dataclass(frozen=True, slots=True)
class SystemSpec:
    """A system's import requirements and its factory (``module:function``, imported lazily
    so that listing systems never imports a peer)."""

    name: SystemName
    requires: tuple[str, ...]
    factory: str
    peer: bool = False
    uses_vectors: bool = False
    embeds_queries: bool = False

    @property
    def uses_model(self) -> bool:
        """Needs the embedding model in this run (cached corpus vectors or query encoding)."""
        return self.uses_vectors or self.embeds_queries


SPECS: dict[SystemName, SystemSpec] = {
    s.name: s
    for s in (
        SystemSpec(
            SystemName.TANDEM_HYBRID, ("engine",), "tandem:tandem_hybrid", uses_vectors=True
        ),
        SystemSpec(
            SystemName.TANDEM_HYBRID_ZSCORE,
            ("engine",),
            "tandem:tandem_hybrid_zscore",
            uses_vectors=True,
        ),
        SystemSpec(
            SystemName.TANDEM_HYBRID_WINDOWS,
            ("engine",),
            "tandem:tandem_hybrid_windows",
            uses_vectors=True,
        ),
        SystemSpec(SystemName.TANDEM_KEYWORD, ("engine",), "tandem:tandem_keyword"),
        SystemSpec(SystemName.TANTIVY, ("tantivy",), "tantivy_raw:TantivySystem"),
        SystemSpec(
            SystemName.FAISS_FLAT,
            ("faiss",),
            "faiss_flat:FaissFlatSystem",
            uses_vectors=True,
            embeds_queries=True,
        ),
        SystemSpec(SystemName.BM25S, ("bm25s",), "bm25s_raw:Bm25sSystem"),
        SystemSpec(
            SystemName.GLUE,
            ("bm25s", "faiss"),
            "glue:GlueSystem",
            peer=True,
            uses_vectors=True,
            embeds_queries=True,
        ),
        SystemSpec(
            SystemName.LANCEDB_HYBRID,
            ("lancedb", "pyarrow"),
            "lancedb_hybrid:LanceDbHybridSystem",
            peer=True,
            uses_vectors=True,
            embeds_queries=True,
        ),
        SystemSpec(
            SystemName.TXTAI_HYBRID,
            ("txtai",),
            "txtai_hybrid:TxtaiHybridSystem",
            peer=True,
            uses_vectors=True,
            embeds_queries=True,
        ),
    )
}

DEFAULT_SYSTEMS: tuple[SystemName, ...] = tuple(SystemName)


def parse_systems(value: str | Sequence[str] | None) -> tuple[SystemName, ...]:
    """``"a,b"`` or ``["a", "b"]`` → names in the order given, duplicates dropped."""
    if value is None:
        return DEFAULT_SYSTEMS
    items = value.split(",") if isinstance(value, str) else list(value)
    names: list[SystemName] = []
    for item in items:
        if item.strip() in ("", "all"):
            names.extend(n for n in DEFAULT_SYSTEMS if n not in names)
            continue
        name = SystemName.from_str(item)
        if name not in names:
            names.append(name)
    return tuple(names)


def missing_requirements(name: SystemName) -> list[str]:
    """Modules a system needs that are not installed (``engine``: API not exported yet)."""
    missing = [m for m in SPECS[name].requires if importlib.util.find_spec(m) is None]
    if "engine" in SPECS[name].requires and "engine" not in missing:
        try:
            from bench.systems.tandem import engine_api

            engine_api()
        except SystemUnavailable:
            missing.append("engine")
    return missing


def build(name: SystemName, ctx: SystemContext) -> BenchSystem:
    """Instantiate a system; ``SystemUnavailable`` when its packages are missing."""
    missing = missing_requirements(name)
    if missing:
        raise SystemUnavailable(f"not installed: {', '.join(missing)}")
    module_name, _, attr = SPECS[name].factory.partition(":")
    module = importlib.import_module(f"bench.systems.{module_name}")
    factory: Callable[[SystemContext], BenchSystem] = getattr(module, attr)
    return factory(ctx)
