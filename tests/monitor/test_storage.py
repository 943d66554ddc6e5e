"""The storage walk both watch backends use: torchao's quantized optimizer states are their parts."""

import pytest

torch = pytest.importorskip("torch")


def test_plain_tensors_give_their_storage():
    from vramlens.monitor.storage import storages

    t = torch.zeros(3)
    assert [st.nbytes() for _, st in storages([t, None, "x", t.view(1, 3)])] == [12, 12]


def test_torchao_states_are_walked_into_codes_scale_and_qmap():
    pytest.importorskip("torchao.optim", reason="torchao's optimizer states need torchao")
    from torchao.optim.subclass_4bit import OptimState4bit
    from torchao.optim.subclass_8bit import OptimState8bit

    from vramlens.monitor.storage import storages

    eight = OptimState8bit.zeros((1024, 1024), True, 256)
    four = OptimState4bit.zeros((1024, 1024), False, 128)
    # not the wrapper's placeholder storage of the outer shape (1024 x 1024 x 4 B)
    assert [st.nbytes() for _, st in storages([eight])] == [1_048_576, 4 * 4_096, 4 * 256]
    assert [st.nbytes() for _, st in storages([four])] == [524_288, 4 * 8_192, 4 * 16]
