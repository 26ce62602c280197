"""run/build.py: the scheduler arguments it fills in from the run's length."""

from tuitrain.run.build import fill_scheduler_kwargs


def test_scheduler_fill_ins():
    from torch.optim.lr_scheduler import CosineAnnealingLR, OneCycleLR, StepLR

    assert fill_scheduler_kwargs(OneCycleLR, {"max_lr": 1.0}, "step", 3, 7, 0)["total_steps"] == 21
    assert fill_scheduler_kwargs(OneCycleLR, {"max_lr": 1.0}, "step", 3, 7, 10)["total_steps"] == 10
    assert fill_scheduler_kwargs(CosineAnnealingLR, {}, "epoch", 5, 7, 0)["T_max"] == 5
    assert fill_scheduler_kwargs(CosineAnnealingLR, {"T_max": 2}, "step", 5, 7, 0)["T_max"] == 2
    assert "total_steps" not in fill_scheduler_kwargs(StepLR, {"step_size": 1}, "step", 5, 7, 0)
