"""The command line: one small module per command (vramlens.cli.main is the entry point)."""

__all__: list[str] = []
