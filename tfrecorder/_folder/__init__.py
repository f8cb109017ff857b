"""The output folder: its layout, manifest, versions, lock, rows and index files, and the
view that pins one version.

Internal: see docs/design.md for why each module lives here."""
