"""Dependency direction (the design map, ``../shared/DESIGN.md`` beside the repository):
engine → sparse, dense, fusion; bench → engine.

``sparse``, ``dense`` and ``fusion`` never import ``engine``, ``bench`` or each other, and
``engine`` never imports ``bench``. Every ``import`` statement counts, wherever it sits:
inside functions, under ``if TYPE_CHECKING:``, in ``try`` blocks, relative or absolute, and
``importlib.import_module("…")`` / ``__import__("…")`` with a literal name.

Importing the light packages must not load torch: ``import fusion`` is pure Python, and
the heavy runtimes of ``dense`` load lazily — as do its providers' clients (ollama,
httpx, pydantic), which a FAISS-only user never needs.
"""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("sparse", "dense", "fusion", "engine", "bench")
LEAVES = ("sparse", "dense", "fusion")

FORBIDDEN: Mapping[str, frozenset[str]] = {
    **{leaf: frozenset({"engine", "bench", *LEAVES} - {leaf}) for leaf in LEAVES},
    "engine": frozenset({"bench"}),
}
"""Package → the top-level packages it must never import."""

IMPORT_FUNCTIONS = frozenset({"importlib.import_module", "import_module", "__import__"})


@dataclass(frozen=True)
class Violation:
    path: Path
    line: int
    importer: str
    imported: str
    statement: str

    def __str__(self) -> str:
        return (
            f"{self.path}:{self.line}: {self.importer!r} must not import {self.imported!r} "
            f"(`{self.statement}`)"
        )


def module_name(root: Path, path: Path) -> str:
    """Dotted module name of ``path`` relative to ``root`` (``pkg/__init__.py`` → ``pkg``)."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(tree: ast.AST, module: str, is_package: bool) -> Iterator[tuple[int, str]]:
    """Yield (line, absolute module name) for every import anywhere in ``tree``."""
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                yield node.lineno, node.module or ""
                continue
            base = package.split(".") if package else []
            up = node.level - 1
            if up > len(base) - 1:
                # Climbs above the top-level package: name the escape explicitly.
                yield node.lineno, "<relative import beyond top-level package>"
                continue
            anchor = base[: len(base) - up]
            yield node.lineno, ".".join([*anchor, *([node.module] if node.module else [])])
        elif (
            isinstance(node, ast.Call)
            and ast.unparse(node.func) in IMPORT_FUNCTIONS
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            yield node.lineno, node.args[0].value


def find_violations(
    root: Path,
    packages: tuple[str, ...] = PACKAGES,
    forbidden: Mapping[str, frozenset[str]] = FORBIDDEN,
) -> tuple[list[Violation], int]:
    """Walk every ``.py`` file of ``packages`` under ``root``; return (violations, files seen).

    A file that does not parse is reported as a violation: the rule cannot be checked on it.
    """
    violations: list[Violation] = []
    seen = 0
    for package in packages:
        banned = forbidden.get(package, frozenset())
        for path in sorted((root / package).rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            seen += 1
            source = path.read_text(encoding="utf-8")
            try:
                tree = ast.parse(source, filename=str(path))
            except SyntaxError as exc:
                violations.append(
                    Violation(path, exc.lineno or 0, package, "?", f"unparsable: {exc.msg}")
                )
                continue
            name = module_name(root, path)
            for line, target in imported_modules(tree, name, path.name == "__init__.py"):
                top = target.split(".")[0]
                if top in banned or target.startswith("<"):
                    statement = source.splitlines()[line - 1].strip()
                    violations.append(Violation(path, line, package, target, statement))
    return violations, seen


# --- the rule, on this repository -----------------------------------------------------


def test_dependency_direction_holds() -> None:
    violations, seen = find_violations(REPO_ROOT)

    assert seen > 0, f"no .py files found under {REPO_ROOT} for {PACKAGES}"
    assert not violations, "dependency direction broken (see DESIGN.md):\n" + "\n".join(
        str(v) for v in violations
    )


def test_walker_sees_the_fusion_package() -> None:
    # Guards against a vacuous pass (wrong root, wrong glob).
    _, seen = find_violations(REPO_ROOT, packages=("fusion",))
    assert (REPO_ROOT / "fusion" / "rrf.py").is_file()
    assert seen >= 2


# --- the walker can fail ----------------------------------------------------------------


def write(root: Path, relative: str, text: str) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


@pytest.fixture
def clean_tree(tmp_path: Path) -> Path:
    for package in PACKAGES:
        write(tmp_path, f"{package}/__init__.py", '"""ok."""\n')
    write(
        tmp_path,
        "engine/search/router.py",
        "import fusion\nfrom sparse import x\nfrom dense.a import b\n",
    )
    write(tmp_path, "bench/run.py", "import engine\nfrom engine.core import Corpus\n")
    write(tmp_path, "sparse/deep/mod.py", "from . import sibling\nfrom ..contracts import K\n")
    write(tmp_path, "fusion/rrf.py", "import math\nimport fusionist\nfrom enginex import y\n")
    return tmp_path


def test_a_clean_tree_passes(clean_tree: Path) -> None:
    violations, seen = find_violations(clean_tree)
    assert violations == []
    assert seen == len(PACKAGES) + 4


@pytest.mark.parametrize(
    ("relative", "source", "importer", "imported"),
    [
        ("fusion/rrf.py", "import engine\n", "fusion", "engine"),
        ("fusion/rrf.py", "import engine.corpus as c\n", "fusion", "engine.corpus"),
        ("sparse/facade.py", "from bench import run\n", "sparse", "bench"),
        (
            "dense/faiss_index.py",
            "from sparse.contracts import KeywordHit\n",
            "dense",
            "sparse.contracts",
        ),
        ("sparse/a.py", "import os, fusion.rrf\n", "sparse", "fusion.rrf"),
        ("fusion/x.py", "def f():\n    import dense\n    return dense\n", "fusion", "dense"),
        (
            "dense/t.py",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from engine import Corpus\n",
            "dense",
            "engine",
        ),
        ("dense/t.py", "try:\n    import bench\nexcept ImportError:\n    pass\n", "dense", "bench"),
        ("engine/cli.py", "from bench.run import main\n", "engine", "bench.run"),
        (
            "engine/deep/x.py",
            "import importlib\nm = importlib.import_module('bench')\n",
            "engine",
            "bench",
        ),
        ("sparse/y.py", "m = __import__('dense.embedders')\n", "sparse", "dense.embedders"),
        # Relative imports resolve against the file's package: sparse/deep/m.py → sparse.
        (
            "sparse/deep/m.py",
            "from ... import engine\n",
            "sparse",
            "<relative import beyond top-level package>",
        ),
        ("fusion/broken.py", "def f(:\n", "fusion", "?"),
    ],
)
def test_a_violation_is_reported(
    clean_tree: Path, relative: str, source: str, importer: str, imported: str
) -> None:
    write(clean_tree, relative, source)

    violations, _ = find_violations(clean_tree)

    assert [(v.importer, v.imported) for v in violations] == [(importer, imported)]
    assert violations[0].path == clean_tree / relative
    assert importer in str(violations[0])


def test_relative_import_resolution() -> None:
    tree = ast.parse("from . import a\nfrom .. import b\nfrom ..c import d\nfrom .e import f\n")
    found = [name for _, name in imported_modules(tree, "sparse.deep.mod", is_package=False)]
    assert found == ["sparse.deep", "sparse", "sparse.c", "sparse.deep.e"]

    in_init = [name for _, name in imported_modules(ast.parse("from . import a\n"), "dense", True)]
    assert in_init == ["dense"]


# --- importing the light packages does not load torch ------------------------------------

PROBE = """
import importlib, sys
importlib.import_module({package!r})
roots = {heavy!r}
heavy = sorted(m for m in sys.modules if m.split(".")[0] in roots)
print(len(heavy))
"""

HEAVY: Mapping[str, tuple[str, ...]] = {
    "sparse": ("torch",),
    "fusion": ("torch", "numpy"),
    "dense": ("torch", "ollama", "httpx", "pydantic", "sentence_transformers"),
    # Every `tandem` command imports the CLI: the ollama client (~0.6 s) and torch load
    # only when a corpus asks a question or embeds.
    "engine.surfaces.cli": ("torch", "ollama", "sentence_transformers", "ray"),
}


@pytest.mark.parametrize("package", [*LEAVES, "engine.surfaces.cli"])
def test_importing_does_not_load_torch(package: str) -> None:
    result = subprocess.run(
        [sys.executable, "-c", PROBE.format(package=package, heavy=HEAVY[package])],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, f"`import {package}` failed:\n{result.stderr}"
    assert result.stdout.strip() == "0", f"`import {package}` loaded one of {HEAVY[package]}"


def test_the_torch_probe_can_fail(tmp_path: Path) -> None:
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed, so there is nothing to load")
    write(tmp_path, "heavy/__init__.py", "import torch\n")
    result = subprocess.run(
        [sys.executable, "-c", PROBE.format(package="heavy", heavy=("torch",))],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() != "0"
