"""Docs that type-check: user code written as README.md writes it passes ``mypy --strict``.

One mypy run over every ```python block of the README (tests/test_readme.py runs them)
and tests/support/typed_usage.py (the shorthands the README's prose shows inline, and
what must stay a type error), with a cold cache in ``tmp_path``: about 8 s on a 2-core
machine. The checks beside it keep ``CorpusConfig``'s type-checking constructor and its
shorthand ``Literal`` types in step with the model and the enums.
"""

from __future__ import annotations

import ast
import re
import shutil
from pathlib import Path
from typing import get_args

import pytest
from mypy import api

from dense import VectorStorage
from engine.config import (
    FUSION_NAMES,
    CorpusConfig,
    FieldType,
    FieldTypeName,
    FusionName,
    VectorStorageName,
)

ROOT = Path(__file__).parents[1]
README = ROOT / "README.md"
USAGE = ROOT / "tests" / "support" / "typed_usage.py"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)

# The snippets are checked, not the packages (the project's own ``mypy`` run does that):
# errors inside them are silenced, and torch and ray — about 2,000 modules that the
# embedders and the cluster block reach, none of them part of the API a snippet touches —
# are not followed. ``mypy_path`` makes the checked API this checkout's.
_CONFIG = """\
[mypy]
strict = True
python_version = 3.11
mypy_path = {root}

[mypy-engine.*,sparse.*,dense.*,fusion.*,bench.*]
follow_imports = silent

[mypy-torch.*,ray.*]
follow_imports = skip
"""


def test_readme_and_typed_usage_pass_mypy_strict(tmp_path: Path) -> None:
    assert BLOCKS
    sources = tmp_path / "src"
    sources.mkdir()
    files = [shutil.copy(USAGE, sources / USAGE.name)]
    for i, block in enumerate(BLOCKS):
        path = sources / f"readme_block_{i}.py"
        path.write_text(block, encoding="utf-8")
        files.append(path)
    config = tmp_path / "mypy.ini"
    config.write_text(_CONFIG.format(root=ROOT), encoding="utf-8")

    stdout, stderr, status = api.run(
        [
            "--config-file",
            str(config),
            "--cache-dir",
            str(tmp_path / "cache"),
            "--no-error-summary",
            "--hide-error-context",
            *map(str, files),
        ]
    )

    assert (status, stdout, stderr) == (0, "", ""), f"mypy --strict:\n{stdout}{stderr}"


def _type_checking_init_parameters() -> tuple[list[str], list[ast.expr]]:
    """The keyword parameters of the ``__init__`` that ``CorpusConfig`` declares for type
    checkers only (under ``if TYPE_CHECKING:``), and their defaults."""
    tree = ast.parse((ROOT / "engine" / "config.py").read_text(encoding="utf-8"))
    (cls,) = (n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "CorpusConfig")
    (init,) = (
        f
        for stmt in cls.body
        if isinstance(stmt, ast.If) and ast.unparse(stmt.test) == "TYPE_CHECKING"
        for f in stmt.body
        if isinstance(f, ast.FunctionDef) and f.name == "__init__"
    )
    assert not init.args.args[1:] and init.args.vararg is None and init.args.kwarg is None
    return [a.arg for a in init.args.kwonlyargs], list(init.args.kw_defaults)


def test_type_checking_init_names_every_field_with_its_defaults() -> None:
    names, defaults = _type_checking_init_parameters()
    assert names == list(CorpusConfig.model_fields)
    required = {n for n, f in CorpusConfig.model_fields.items() if f.is_required()}
    optional = {n for n, d in zip(names, defaults, strict=True) if d is not None}
    assert optional == set(names) - required


def test_shorthand_literals_are_the_names_run_time_takes() -> None:
    assert get_args(FieldTypeName) == tuple(t.value for t in FieldType)
    assert get_args(VectorStorageName) == tuple(v.value for v in VectorStorage)
    assert get_args(FusionName) == FUSION_NAMES


@pytest.mark.parametrize("fusion", get_args(FusionName))
def test_fusion_names_are_accepted(fusion: FusionName) -> None:
    assert CorpusConfig(name="c", fusion=fusion).fusion.kind == fusion


def test_field_type_and_storage_names_are_accepted() -> None:
    for kind in get_args(FieldTypeName):
        assert CorpusConfig(name="c", fields={"x": kind}).fields["x"] is FieldType(kind)
    for storage in get_args(VectorStorageName):
        config = CorpusConfig(name="c", vector_storage=storage)
        assert config.vector_storage is VectorStorage(storage)
