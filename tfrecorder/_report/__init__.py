"""Know your data: the checks of the conversion's own pass and the report built from them.

Internal: see docs/design.md for why each module lives here."""
