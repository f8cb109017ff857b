"""The package's version, in a leaf module that imports nothing: any module may import
it without importing the package's ``__init__`` (and everything that imports), and
setup.py reads it without importing the package at all."""

__version__ = "0.1.0"
