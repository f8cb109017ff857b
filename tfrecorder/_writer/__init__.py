"""What a conversion writes with: the plan, the staged tasks, shards, images, the Beam
pipeline and its runners, and publishing, the last step.

Internal: see docs/design.md for why each module lives here."""
