"""The read path: router, searcher, visibility, excerpts, sources (fetch, grep, evidence)."""
