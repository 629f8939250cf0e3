"""``cluster.json``: what a sharded corpus is — its config, shard count and placement.

The manifest lives in the sharded corpus's root directory, beside one ordinary Tandem
engine directory per shard (``shards/000``, ``shards/001``, ...). Only the coordinator
reads it; each shard actor is told its own directory.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, field_validator

from engine.atomic_files import replace_file
from engine.cluster.errors import ClusterExists, ClusterNotFound
from engine.cluster.routing import MAX_SHARDS
from engine.config import STORED, CorpusConfig
from engine.errors import InvalidArgument

MANIFEST_NAME = "cluster.json"
FORMAT = 1


class ClusterManifest(BaseModel):
    """A sharded corpus's identity. ``placement``, when given, names one Ray custom
    resource per shard (``ray start --resources '{"tandem-disk-a": 1}'``): the shard's
    actor is only ever scheduled on a node offering it — the node whose disk holds it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    format: int = FORMAT
    config: CorpusConfig
    shards: Annotated[int, Field(ge=1, le=MAX_SHARDS)]
    placement: tuple[str, ...] | None = None
    uid: Annotated[str, Field(pattern=r"^[0-9a-f]{1,32}$")] | None = None
    """Made once at creation; names this corpus's detached shard actors, so two sharded
    corpora of one name (other roots) never share them. (Manifests written before it
    existed have none, and keep the name-only actor names they started with.)"""

    @field_validator("placement")
    @classmethod
    def _names(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if value is not None and not all(isinstance(v, str) and 0 < len(v) <= 128 for v in value):
            raise ValueError("placement names must be 1-128 character strings")
        reserved = sorted(set(value or ()) & _RAY_RESOURCES)
        if reserved:
            # Ray refuses them as custom resources, after the directory was made.
            raise ValueError(
                f"placement names are custom resources; {', '.join(reserved)} is Ray's own "
                "(ask for CPUs and GPUs with ClusterOptions, name a resource you defined)"
            )
        return value

    def shard_directory(self, root: Path, index: int) -> Path:
        return root / "shards" / f"{index:03d}"


_RAY_RESOURCES = frozenset(
    {"CPU", "GPU", "memory", "object_store_memory"}
    # Accelerators Ray manages, each refusing a fraction (Ray 2.x's accelerator managers).
    | {"TPU", "HPU", "NPU", "neuron_cores", "FURIOSA", "RBLN", "MBLT", "TTNPU"}
)
"""Resource names Ray reserves (``ray.remote(resources=...)`` refuses them as custom
resources; a name Ray adds later is still refused at start, as ``InvalidArgument``)."""


def write_manifest(root: Path, manifest: ClusterManifest) -> None:
    """Create ``root/cluster.json`` (atomically); refuses an existing one."""
    if manifest.placement is not None and len(manifest.placement) != manifest.shards:
        raise InvalidArgument("placement must name one resource per shard")
    root.mkdir(parents=True, exist_ok=True)
    path = root / MANIFEST_NAME
    if path.exists():
        raise ClusterExists(f"{root} already holds a sharded corpus")
    replace_file(path, manifest.model_dump_json(indent=2))


def read_manifest(root: Path) -> ClusterManifest:
    path = root / MANIFEST_NAME
    if not path.is_file():
        raise ClusterNotFound(f"no sharded corpus at {root} (no {MANIFEST_NAME})")
    try:
        return ClusterManifest.model_validate(json.loads(path.read_text("utf-8")), context=STORED)
    except ValueError as exc:
        raise InvalidArgument(f"{path} is not a valid cluster manifest: {exc}") from exc
