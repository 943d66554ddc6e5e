"""Reports: text, JSON, HTML and SVG renderings of values that were computed elsewhere."""

__all__: list[str] = []
