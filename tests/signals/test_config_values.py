"""``config_values.read_fp16`` agrees with the installed DeepSpeed's ``DeepSpeedFP16Config`` on what it
takes (and as what) and what it refuses, value by value: the replay and ZD623 trust it."""

from __future__ import annotations

import itertools
import json
import math

import pytest

from zerodoctor.signals.config_values import Fp16Config, read_fp16

precision_config = pytest.importorskip("deepspeed.runtime.precision_config")

# What a JSON config can hold, hostile values included (json.loads takes NaN and Infinity).
VALUES = [0, -1, 1, 2, 7, 1.0, 1.5, -0.0, 2.0 ** 62, 2.0 ** 63, 1e30, math.nan, math.inf, -math.inf, 10 ** 30,
          "1", " 3 ", "1_000", "1.0", "1.", "1e3", "-2", "abc", "", "auto", "yes", "off", "TRUE", None, True, False,
          [1], {"a": 1}]
FIELDS = ["enabled", "loss_scale", "initial_scale_power", "loss_scale_window", "hysteresis",
          "consecutive_hysteresis", "min_loss_scale"]


def _deepspeed(section: object) -> dict | None:
    """DeepSpeed's reading of ``{"fp16": section}``: the resolved fields, or None where it raises."""
    try:
        fp16 = precision_config.get_float16_config({"fp16": section})
    except Exception:  # noqa: BLE001 - pydantic's ValidationError, a TypeError for a non-mapping, an OverflowError
        return None
    return {name: getattr(fp16, name) for name in FIELDS}


def _ours(section: object) -> dict | None:
    fp16, refused = read_fp16({"fp16": section})
    assert (fp16 is None) == bool(refused)
    return None if fp16 is None else {name: getattr(fp16, name) for name in FIELDS}


@pytest.mark.parametrize("field", FIELDS)
@pytest.mark.parametrize("enabled", [True, False])
def test_each_value_of_each_field_is_read_as_deepspeed_reads_it(field: str, enabled: bool) -> None:
    for value in VALUES:
        section = {"enabled": enabled, field: value} if field != "enabled" else {"enabled": value}
        theirs, ours = _deepspeed(section), _ours(section)
        assert ours == theirs, f"fp16.{field} = {value!r} (enabled {enabled}): DeepSpeed {theirs}, ours {ours}"
        if ours is not None:
            assert [type(ours[k]) for k in FIELDS] == [type(theirs[k]) for k in FIELDS], (field, value)


@pytest.mark.parametrize("section", [None, [1], "fp16", 5])
def test_a_section_that_is_no_object_is_refused(section: object) -> None:
    assert _deepspeed(section) is None
    assert read_fp16({"fp16": section})[1] == {"fp16": f"{json.dumps(section)} is not a section (a JSON object)"}


def test_the_dynamic_scalers_checks_apply_only_where_it_runs() -> None:
    """A window or floor of 0 is refused with dynamic scaling on, and carried unused with a static scale."""
    for window, floor, scale in itertools.product([0, -3, 1000], [0, -1, 1], [0, 128]):
        section = {"enabled": True, "loss_scale": scale, "loss_scale_window": window, "min_loss_scale": floor}
        assert _ours(section) == _deepspeed(section), section
    assert read_fp16({"fp16": {"enabled": True, "loss_scale_window": 0}})[1] == {
        "fp16.loss_scale_window": "0 is not > 0 (dynamic loss scaling divides by it)"}


def test_a_missing_section_is_deepspeeds_defaults() -> None:
    assert read_fp16({}) == (Fp16Config(), {})
    assert read_fp16(None) == (Fp16Config(), {})
    assert Fp16Config(initial_scale_power=2000).initial_scale == math.inf
