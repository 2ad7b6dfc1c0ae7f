"""release_pipeline: the four stages, a change's journey through them, gates, and the ledger of
what happened. Filled by the release issues."""
