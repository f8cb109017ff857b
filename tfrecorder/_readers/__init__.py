"""What reads a folder back: tf.data pipelines, pandas tables, inspection, previews, and
the shard cache.

Internal: see docs/design.md for why each module lives here."""
