"""Our replay of the fp16 loss scaler agrees with DeepSpeed's own ``DynamicLossScaler``.

The forecast in ZD201 ("N more overflows in a row abort the run") is only as good as the
replay, so it is checked against the real class on random overflow histories: after each
history, feeding the real scaler overflows until it raises must take exactly the number of
overflows we forecast.
"""

from __future__ import annotations

import math
import random

import pytest

import json

from zerodoctor.signals.view import Reads, RunView
from zerodoctor.signals import numerics

deepspeed_loss_scaler = pytest.importorskip("deepspeed.runtime.fp16.loss_scaler")


@pytest.fixture(autouse=True)
def _rank_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    # update_scale logs on rank 0 only and asks deepspeed.comm for the rank; no process group is needed.
    monkeypatch.setattr(deepspeed_loss_scaler.dist, "get_rank", lambda *a, **k: 0)


def _overflows_to_min(config: dict, overflow: list[bool], reported: list[float | None], min_scale: float) -> int:
    """The fold's forecast after the history, its state round-tripped through JSON as the store keeps it."""
    view = RunView(0, "r", Reads.of([numerics]))
    view.events["run_start"] = [{"rank": 0, "config": config}]
    fold = numerics.Fold()
    for i, (flag, scale) in enumerate(zip(overflow, reported)):
        fold.step({"step": i, "t": 0.0, "overflow": flag, "loss_scale": scale, "lr": None,
                   "loss_nonfinite": 0, "grad_nonfinite": 0}, view)
        if i % 50 == 49:
            fold = numerics.Fold.load(json.loads(json.dumps(fold.dump())))
    return numerics._ScalerReplay(numerics.read_fp16(config)[0], fold.replay).overflows_to_min()


def _real_overflows_until_abort(scaler) -> int:
    n = 0
    while True:
        n += 1
        try:
            scaler.update_scale(True)
        except Exception as exc:  # noqa: BLE001 - DeepSpeed raises a bare Exception at the minimum scale
            assert "already at minimum" in str(exc)
            return n


@pytest.mark.parametrize("seed", range(40))
def test_forecast_matches_deepspeed(seed: int) -> None:
    rng = random.Random(seed)
    config = {"fp16": {"initial_scale_power": rng.choice([8, 12, 16]), "loss_scale_window": rng.choice([5, 20, 1000]),
                       "hysteresis": rng.choice([1, 2, 4]), "consecutive_hysteresis": rng.random() < 0.3,
                       "min_loss_scale": rng.choice([1, 4])}}
    fp16 = config["fp16"]
    real = deepspeed_loss_scaler.DynamicLossScaler(
        init_scale=2.0 ** fp16["initial_scale_power"], scale_window=fp16["loss_scale_window"],
        min_scale=fp16["min_loss_scale"], delayed_shift=fp16["hysteresis"],
        consecutive_hysteresis=fp16["consecutive_hysteresis"])
    overflow, scales = [], []
    p = rng.choice([0.02, 0.2, 0.5])
    for _ in range(rng.randint(1, 400)):
        flag = rng.random() < p
        if flag and real.cur_scale == real.min_scale and (real.delayed_shift == 1 or real.cur_hysteresis == 1):
            flag = False  # keep the run alive: the history must be one DeepSpeed survived
        scales.append(real.cur_scale)
        overflow.append(flag)
        real.update_scale(flag)
    # the probe reports the scale each step used; half the runs hide it to exercise the pure replay
    reported = scales if seed % 2 else [None] * len(scales)
    assert _overflows_to_min(config, overflow, reported, fp16["min_loss_scale"]) == _real_overflows_until_abort(real)


def _real_overflows_within(scaler, limit: int) -> int | None:
    """Overflows until DeepSpeed raises at the minimum scale; None when ``limit`` of them never get there."""
    for n in range(1, limit + 1):
        try:
            scaler.update_scale(True)
        except Exception as exc:  # noqa: BLE001 - DeepSpeed raises a bare Exception
            assert "already at minimum" in str(exc)
            return n
    return None


@pytest.mark.parametrize("hysteresis,min_scale,power", [
    (0, 1, 16), (-3, 1, 16),  # counts down past 1: DeepSpeed never lowers the scale
    (10 ** 30, 1, 16),  # accepted; only arithmetic reaches the end of its countdown
    (2, 2 ** 70, 16),  # a floor above the starting scale
    (1, 1, -20),  # a starting scale below the floor
])
def test_forecast_of_accepted_but_degenerate_settings_is_bounded_and_deepspeeds(
        hysteresis: int, min_scale: int, power: int) -> None:
    """Values DeepSpeed takes (ints, any sign or size) used to send the forecast into an endless loop;
    now it is counted, and where DeepSpeed never raises the forecast says so (None)."""
    config = {"fp16": {"enabled": True, "initial_scale_power": power, "hysteresis": hysteresis,
                       "min_loss_scale": min_scale}}
    fold = numerics.Fold()
    view = RunView(0, "r", Reads.of([numerics]))
    view.events["run_start"] = [{"rank": 0, "config": config}]
    for i, flag in enumerate([False, True, False]):
        fold.step({"step": i, "t": 0.0, "overflow": flag, "loss_scale": None, "lr": None,
                   "loss_nonfinite": 0, "grad_nonfinite": 0}, view)
    fp16 = numerics.read_fp16(config)[0]
    forecast = numerics._ScalerReplay(fp16, fold.replay).overflows_to_min()
    real = deepspeed_loss_scaler.DynamicLossScaler(
        init_scale=2 ** power, scale_window=1000, min_scale=min_scale, delayed_shift=hysteresis,
        consecutive_hysteresis=False)
    for flag in [False, True, False]:
        real.update_scale(flag)
    if hysteresis > 10 ** 6:  # the real scaler would need 10^30 calls: its hysteresis counter tells the same
        assert forecast == real.cur_hysteresis - 1 + 1 + 16  # down to 1, 16 halvings from 2^16 to 1, the raise
    else:
        assert forecast == _real_overflows_within(real, 10_000)


@pytest.mark.parametrize("reported", [math.nan, math.inf, -4.0, 0.0])
def test_a_reported_scale_no_scaler_has_ends_the_forecast_instead_of_looping(reported: float) -> None:
    fp16 = numerics.read_fp16({})[0]
    replay = numerics._ScalerReplay(fp16)
    replay.scale = reported
    assert replay.overflows_to_min() == (None if reported in (math.inf,) or reported != reported else 3)
