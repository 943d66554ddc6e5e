import pytest
from _specs import llama_config


@pytest.fixture
def llama7b():
    from vramlens.models import load_model

    return load_model(llama_config())
