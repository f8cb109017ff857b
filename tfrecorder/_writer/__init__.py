"""What a conversion writes with: the plan, the staged tasks, shards, records, images, the
Beam pipeline and its runners.

Internal: see docs/design.md for why each module lives here."""
