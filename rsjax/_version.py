"""The version of rsjax (one place; ``pyproject.toml`` states it too)."""

__version__ = "0.1.0"
