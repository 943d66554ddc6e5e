import __future__

import importlib
import subprocess
import sys
import types
import typing
from pathlib import Path

import pytest

import vramlens

SRC = Path(__file__).resolve().parents[1] / "src"


def test_public_api_is_what_is_meant():
    assert vramlens.__all__ == [
        "Breakdown", "COMPONENTS", "Component", "Estimate", "GPU", "ModelSpec", "TensorInfo", "VramlensError",
        "Workload", "calibrate", "capacity", "estimate", "fit", "get_gpu", "list_gpus", "load_model", "make_workload", "watch",
    ]
    for name in vramlens.__all__:
        assert getattr(vramlens, name) is not None


def test_core_imports_no_torch():
    code = (
        "import sys, vramlens; vramlens.estimate('gpt2', mode='train', gpu='T4'); "
        "import vramlens.advise, vramlens.allocator; "
        "bad = [m for m in ('torch', 'transformers', 'peft') if m in sys.modules]; print(bad); sys.exit(1 if bad else 0)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


PACKAGES = sorted(
    ".".join(p.relative_to(SRC).parent.parts)
    for p in SRC.joinpath("vramlens").rglob("__init__.py")
)


def public_members(module) -> list[str]:
    """What a package offers by name: its public attributes and lazy names (``__dir__``), less submodules,
    ``from __future__`` features and the ``typing`` helpers its annotations use."""
    members = []
    for name in dir(module):
        if name.startswith("_"):
            continue
        value = vars(module).get(name)
        if isinstance(value, (types.ModuleType, __future__._Feature)) or value is getattr(typing, name, object()):
            continue
        members.append(name)
    return sorted(members)


#: Packages whose __all__ is known not to match yet (none).
PENDING: dict[str, str] = {}


@pytest.mark.parametrize("package", [
    pytest.param(p, marks=pytest.mark.xfail(reason=PENDING[p], strict=True)) if p in PENDING else p
    for p in PACKAGES
])
def test_each_package_exports_exactly_its_sorted_all(package):
    module = importlib.import_module(package)
    exported = getattr(module, "__all__", None)
    assert exported is not None, f"{package} has no __all__"
    assert exported == sorted(exported), f"{package}.__all__ is not sorted"
    assert exported == public_members(module), f"{package}: __all__ differs from its public names"
