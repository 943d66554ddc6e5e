import pytest
from _specs import llama_config


@pytest.fixture
def llama7b():
    from vramlens.models import load_model

    return load_model(llama_config())


@pytest.fixture(scope="module")
def llama8b():
    """Llama 3.1 8B from the bundled catalog (torchtitan's model in the FSDP, TP and CP tests)."""
    from vramlens.models.catalog import catalog_spec

    spec = catalog_spec("llama-3.1-8b")
    assert spec is not None
    return spec
