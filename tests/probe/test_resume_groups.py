"""The lr a fix patches, kept across a checkpoint load for param groups given different lrs (LoRA, layer-wise lr).

A real torch AdamW with two groups, the second at 16x the configured lr, under a real LambdaLR linear decay: the
checkpoint's run was configured at 1e-3, the patch sets 5e-4. Re-based, every group runs what a fresh run
configured at 5e-4 would at that step, the 16x ratio kept (setting each base to the patched lr lost it).
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from zerodoctor.probe.resume import FixKeeper

STEPS, DONE, RATIO = 40, 25, 16


def _engine(lr: float) -> SimpleNamespace:
    """An optimizer and schedule as a training script builds them from its configured ``lr``."""
    torch.manual_seed(0)
    base, lora = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)
    groups = [{"params": base.parameters()}, {"params": lora.parameters(), "lr": lr * RATIO}]
    optimizer = torch.optim.AdamW(groups, lr=lr)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: (STEPS - step) / STEPS)
    return SimpleNamespace(optimizer=optimizer, lr_scheduler=scheduler)


def _train(engine: SimpleNamespace, steps: int) -> None:
    for _ in range(steps):
        engine.optimizer.step()
        engine.lr_scheduler.step()


def _lrs(engine: SimpleNamespace) -> list[float]:
    return [group["lr"] for group in engine.optimizer.param_groups]


def test_groups_with_their_own_lr_keep_their_ratio_across_the_load() -> None:
    old = _engine(1e-3)
    _train(old, DONE)
    resumed, keeper = _engine(5e-4), FixKeeper({"optimizer": {"params": {"lr": 5e-4}}})
    taken = keeper.before_load(resumed)
    resumed.optimizer.load_state_dict(old.optimizer.state_dict())  # what load_checkpoint restores
    resumed.lr_scheduler.load_state_dict(old.lr_scheduler.state_dict())
    keeper.after_load(resumed, taken)
    fresh = _engine(5e-4)
    _train(fresh, DONE)
    assert resumed.lr_scheduler.base_lrs == pytest.approx([5e-4, 5e-4 * RATIO])
    assert _lrs(resumed) == pytest.approx(_lrs(fresh))
    _train(resumed, 1)
    _train(fresh, 1)
    assert _lrs(resumed) == pytest.approx(_lrs(fresh))
    observed = {"lr": _lrs(resumed)[0], "base_lr": resumed.lr_scheduler.base_lrs[0]}
    assert keeper.check(observed) == ({"lr": 5e-4, "base_lr": 5e-4}, True)
