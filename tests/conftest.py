"""Root conftest: its presence puts tests/ on sys.path, so tests/tiny_configs.py imports from every folder."""
