"""Callbacks that bring vramlens.watch into training frameworks (each imports its framework on use)."""

__all__: list[str] = []
