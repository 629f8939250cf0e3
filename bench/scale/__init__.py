"""``python -m bench scale``: cost against corpus size on synthetic corpora."""

__all__: list[str] = []
