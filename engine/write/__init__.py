"""The write path: ingest, write batches, re-embedding, repair, derived-index catch-up."""
