"""The output folder as a format: its layout, manifest, record and Example codecs, split
names, lock, rows and index files, and the view that pins one version.

Internal: see docs/design.md for why each module lives here."""
