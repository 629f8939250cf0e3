"""Filter conditions as SQL over ``document_fields``, for the store and the LIKE fallback.

Each condition becomes ``<id column> IN (SELECT source_id FROM document_fields WHERE
name = ? AND is_public = 1 AND ...)``, so SQLite finds the matching values through the
``(name, is_public, value)`` indexes and reads public documents' rows only: how long a
filter takes must not tell how many non-public documents carry a value. Every value is a
bound parameter.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

from sparse import FieldFilter, RangeFilter, TermsFilter

FALSE = "0"


class RowScope(enum.Enum):
    """Which ``document_fields`` rows a condition reads; the value is its test of the
    row's ``is_public``."""

    PUBLIC = "= 1"
    ALL = "IN (0, 1)"  # every row, and the (name, is_public, value) indexes stay usable
    UNMARKED = ""
    """A schema 1 store read before a writable open migrated it: its rows carry no
    visibility (the caller's query checks ``documents.is_public`` as it always does)."""

    def sql(self, column: str = "is_public") -> str:
        """The condition on ``column``, ready to lead others (``"... AND "``), or ``""``."""
        return f"{column} {self.value} AND " if self.value else ""


def filter_sql(
    filters: Sequence[FieldFilter], id_column: str = "source_id", *, rows: RowScope
) -> tuple[str, list[object]]:
    """An SQL condition (``"1"`` when there are no filters) and its parameters."""
    scope = rows.sql()
    parts: list[str] = []
    params: list[object] = []
    for condition in filters:
        if isinstance(condition, TermsFilter):
            if not condition.values:
                return FALSE, []
            column = "value_text" if isinstance(condition.values[0], str) else "value_int"
            marks = ",".join("?" * len(condition.values))
            parts.append(
                f"{id_column} IN (SELECT source_id FROM document_fields "
                f"WHERE name = ? AND {scope}{column} IN ({marks}))"
            )
            params += [condition.field, *condition.values]
        elif isinstance(condition, RangeFilter):
            low, high = condition.low, condition.high
            if low is not None and high is not None and low > high:
                return FALSE, []
            bounds = [f"name = ? AND {scope}value_int IS NOT NULL"]
            params.append(condition.field)
            for op, bound in ((">=", low), ("<=", high)):
                if bound is not None:
                    bounds.append(f"value_int {op} ?")
                    params.append(bound)
            parts.append(
                f"{id_column} IN (SELECT source_id FROM document_fields "
                f"WHERE {' AND '.join(bounds)})"
            )
        else:
            raise ValueError(f"unknown filter {type(condition).__name__}")
    return (" AND ".join(parts) or "1"), params
