"""Argument types shared by the HTTP API and the MCP tools: what a JSON body may send.

pydantic's default (lax) mode reads ``true`` as the integer 1 and ``"yes"`` or ``1`` as
the boolean true, so ``{"top_k": true}`` answered one passage and ``{"fixed": "yes"}``
searched for plain text. A boolean is not a count and nothing but ``true``/``false`` is a
boolean: both are refused with the field named (422 over HTTP, a tool error over MCP).
A count sent as a numeric string (``"5"``) is still read, as Elasticsearch reads one:
agents' tool calls send those.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator, StrictBool
from pydantic_core import PydanticCustomError

__all__ = ["NOT_A_BOOLEAN", "Count", "Flag"]


def _not_a_boolean(value: Any) -> Any:
    if isinstance(value, bool):
        raise PydanticCustomError("int_type", "Input should be a valid integer, not a boolean")
    return value


NOT_A_BOOLEAN = BeforeValidator(_not_a_boolean)
"""For an ``Annotated[int, Field(...), NOT_A_BOOLEAN]``: it goes after the ``Field``, or the
field's bounds are checked but missing from its JSON schema."""

Count = Annotated[int, NOT_A_BOOLEAN]
"""An integer; ``true``/``false`` refused (a numeric string is read as its number)."""

Flag = StrictBool
"""``true`` or ``false`` only."""
