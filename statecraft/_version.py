"""The version of statecraft (one place; the package root and every writer record it)."""

__version__ = "0.1.0"
