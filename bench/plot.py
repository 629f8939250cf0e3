"""PNG plots with matplotlib's Agg backend (no display needed)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.results import Status, SystemResult


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_quality_vs_latency(
    results: Sequence[SystemResult], path: Path, floors: Mapping[str, float] | None = None
) -> Path:
    """nDCG@10 against p50 latency (log x), one point per system, one panel per corpus;
    ``floors`` (corpus → query-embedding p50) draws the floor every hybrid system pays."""
    plt = _pyplot()
    ok = [r for r in results if r.status is Status.OK and r.p50_ms and r.ndcg_at_10 is not None]
    corpora = list(dict.fromkeys(r.corpus for r in results)) or ["(no results)"]
    fig, axes = plt.subplots(1, len(corpora), figsize=(5.2 * len(corpora), 4.4), squeeze=False)
    systems = list(dict.fromkeys(r.system for r in ok))
    colors = {s: f"C{i % 10}" for i, s in enumerate(systems)}
    for ax, corpus in zip(axes[0], corpora, strict=True):
        for r in (r for r in ok if r.corpus == corpus):
            ax.scatter(r.p50_ms, r.ndcg_at_10, color=colors[r.system], label=r.system, s=40)
            ax.annotate(
                r.system,
                (r.p50_ms, r.ndcg_at_10),
                fontsize=7,
                xytext=(4, 3),
                textcoords="offset points",
            )
        floor = (floors or {}).get(corpus)
        if floor:
            ax.axvline(floor, color="grey", linestyle="--", linewidth=1)
            ax.annotate(
                "query-embedding p50",
                (floor, 0.02),
                xycoords=("data", "axes fraction"),
                rotation=90,
                fontsize=7,
                color="grey",
                xytext=(-9, 0),
                textcoords="offset points",
            )
        ax.set_xscale("log")
        ax.set_title(corpus)
        ax.set_xlabel("p50 latency per query, ms (log)")
        ax.set_ylabel("nDCG@10")
        ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_cost_vs_size(
    sizes: Sequence[int],
    panels: dict[str, dict[str, Sequence[float | None]]],
    path: Path,
) -> Path:
    """One panel per measure family (y label → {series label → value per size}), log-log."""
    plt = _pyplot()
    fig, axes = plt.subplots(
        1, max(1, len(panels)), figsize=(5.2 * max(1, len(panels)), 4.4), squeeze=False
    )
    for ax, (ylabel, series) in zip(axes[0], panels.items(), strict=False):
        for label, values in series.items():
            points = [(n, v) for n, v in zip(sizes, values, strict=True) if v is not None and v > 0]
            if points:
                ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=label)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("documents")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
