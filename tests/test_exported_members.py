import subprocess
import sys

import vramlens


def test_public_api_is_what_is_meant():
    assert vramlens.__all__ == [
        "Breakdown", "COMPONENTS", "Component", "Estimate", "GPU", "ModelSpec", "TensorInfo", "VramlensError",
        "Workload", "estimate", "get_gpu", "list_gpus", "load_model", "make_workload",
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
