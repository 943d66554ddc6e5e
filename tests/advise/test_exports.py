import vramlens.advise as advise


def test_exported_members_are_sorted_and_meant():
    assert advise.__all__ == sorted(advise.__all__)
    assert set(advise.__all__) == {
        "REMEDIES", "FitResult", "Links", "Plan", "StepCost", "TrainingCost", "check_constraints", "fit",
        "inference_request", "search", "settings_argv", "settings_of", "training_step",
    }
    for name in advise.__all__:
        assert getattr(advise, name) is not None
