"""What a conversion reads: tables of every source kind, checked, labelled, split and
spilled.

Internal: see docs/design.md for why each module lives here."""
