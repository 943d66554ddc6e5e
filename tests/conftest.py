"""Root conftest: its presence puts tests/ on sys.path, so tests/tiny_configs.py imports from every folder."""

import importlib.util


def pytest_configure(config):
    """Import torch once, outside any test's captured output, where it is installed.

    ``import torch`` installs ``logging.StreamHandler``s on torch's loggers bound to the ``sys.stderr`` of that
    moment. Imported first inside a test that captures output (capsys), they keep that test's capture stream,
    which pytest closes afterwards; a later torch warning (torchao registering its enums) then prints
    "--- Logging error --- Traceback ..." into another test's output. Imported here, they keep the session's
    stream. Nothing in vramlens depends on it: a real process has one stderr.
    """
    if importlib.util.find_spec("torch") is not None:
        import torch  # noqa: F401
