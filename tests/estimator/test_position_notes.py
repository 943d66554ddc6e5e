"""A sequence longer than max_position_embeddings gets a note that says what happens."""

from vramlens import estimate


def test_learned_positions_cannot_run_past_their_table():
    e = estimate("gpt2", seq=2048)
    (note,) = [n for n in e.breakdown.notes if "max_position_embeddings" in n]
    assert "2,048 tokens exceed the model's max_position_embeddings=1,024" in note and "cannot run them" in note


def test_rotary_without_scaling_runs_but_was_not_trained_that_long():
    assert any("was not trained that long" in n for n in estimate("llama-2-7b", seq=8192).breakdown.notes)


def test_rope_scaling_and_short_runs_say_nothing():
    assert not any("max_position" in n for n in estimate("llama-3.1-8b", seq=8192).breakdown.notes)  # rope_scaling
    assert not any("max_position" in n for n in estimate("gpt2", seq=1000, new_tokens=24).breakdown.notes)
    assert any("1,025 tokens" in n for n in estimate("gpt2", seq=1000, new_tokens=25).breakdown.notes)


def test_generation_names_the_transformers_cache_it_assumes():
    assert any("transformers >= 4.42 DynamicCache assumed" in n for n in estimate("gpt2", seq=128, new_tokens=16).breakdown.notes)
    assert not any("transformers >= 4.42" in n for n in estimate("gpt2", seq=128).breakdown.notes)
