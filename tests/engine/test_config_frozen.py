"""``CorpusConfig`` is frozen all the way down: its mappings cannot change after
validation, it is hashable, and it round-trips through its JSON file unchanged."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from engine import CorpusConfig, FieldType, OllamaEmbedding


def _config() -> CorpusConfig:
    return CorpusConfig(name="letters", languages={1: "de"}, fields={"year": "integer"})


def test_mappings_cannot_be_changed_in_place() -> None:
    """Regression: ``languages`` and ``fields`` were plain dicts, writable after
    validation (bypassing it) and breaking ``hash(config)``."""
    config = _config()
    with pytest.raises(TypeError):
        config.fields["author"] = FieldType.KEYWORD  # type: ignore[index]
    with pytest.raises(TypeError):
        config.languages[2] = "cjk"  # type: ignore[index]
    with pytest.raises(AttributeError):
        config.fields.clear()  # type: ignore[attr-defined]
    assert dict(config.fields) == {"year": FieldType.INTEGER}


def test_a_config_is_hashable_and_equal_configs_hash_alike() -> None:
    assert hash(_config()) == hash(_config())
    assert len({_config(), _config()}) == 1


def test_the_callers_dict_is_copied_not_kept() -> None:
    declared = {"year": "integer"}
    config = CorpusConfig(name="c", fields=declared)
    declared["author"] = "keyword"
    assert list(config.fields) == ["year"]


def test_json_round_trip_is_exact() -> None:
    config = _config()
    again = CorpusConfig.model_validate_json(config.model_dump_json())
    assert again == config and hash(again) == hash(config)
    assert again.languages[1] == "de" and again.fields["year"] is FieldType.INTEGER
    assert config.model_dump()["fields"] == {"year": FieldType.INTEGER}


def test_title_weight_defaults_to_the_keyword_index_default_and_is_bounded() -> None:
    from pydantic import ValidationError

    from sparse import DEFAULT_TITLE_WEIGHT, MAX_TITLE_WEIGHT

    assert CorpusConfig(name="c").title_weight == DEFAULT_TITLE_WEIGHT
    assert CorpusConfig(name="c", title_weight=MAX_TITLE_WEIGHT).title_weight == MAX_TITLE_WEIGHT
    for bad in (0, MAX_TITLE_WEIGHT + 1, 2.5, "3", True):
        with pytest.raises(ValidationError):
            CorpusConfig(name="c", title_weight=bad)
    again = CorpusConfig.model_validate_json(
        CorpusConfig(name="c", title_weight=1).model_dump_json()
    )
    assert again.title_weight == 1


@pytest.mark.parametrize(
    "host", ["http://127.0.0.1:11434", "localhost:11434", "https://ollama.example.com/"]
)
def test_an_ollama_host_the_client_can_dial_is_kept(host: str) -> None:
    assert OllamaEmbedding(model="m", host=host).host == host


@pytest.mark.parametrize(
    "host", ["h:99999", "h:abc", "http://h:0", "ftp://h:21", "http://:11434", "http://"]
)
def test_an_ollama_host_no_client_can_dial_is_refused(host: str) -> None:
    """Refused when the corpus is configured, not discovered as a corpus whose every
    document is stored degraded."""
    with pytest.raises(ValidationError, match="host"):
        OllamaEmbedding(model="m", host=host)
