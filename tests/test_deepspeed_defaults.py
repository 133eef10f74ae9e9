"""DeepSpeed's defaults and byte units live in one module each, and agree with the installed DeepSpeed and PyTorch."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from zerodoctor.deepspeed import defaults as ds
from zerodoctor.messages.units import GiB, KiB, MiB, format_bytes

ROOT = Path(__file__).resolve().parents[1]


def test_the_defaults_are_the_installed_deepspeeds() -> None:
    pytest.importorskip("deepspeed")
    from deepspeed.runtime.lr_schedules import WarmupLR
    from deepspeed.runtime.precision_config import DeepSpeedFP16Config
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig

    zero = DeepSpeedZeroConfig()
    assert (zero.reduce_bucket_size, zero.allgather_bucket_size, zero.prefetch_bucket_size,
            zero.param_persistence_threshold) == (ds.REDUCE_BUCKET_SIZE, ds.ALLGATHER_BUCKET_SIZE,
                                                  ds.STAGE3_PREFETCH_BUCKET_SIZE, ds.STAGE3_PARAM_PERSISTENCE_THRESHOLD)
    fp16 = DeepSpeedFP16Config()
    assert {key: getattr(fp16, key) for key in ds.FP16} == ds.FP16
    warmup = inspect.signature(WarmupLR).parameters
    assert (warmup["warmup_min_lr"].default, warmup["warmup_num_steps"].default) == (ds.WARMUP_MIN_LR,
                                                                                     ds.WARMUP_NUM_STEPS)


def test_the_batch_keys_are_the_engines_getters() -> None:
    pytest.importorskip("deepspeed")
    from deepspeed.runtime.engine import DeepSpeedEngine

    assert all(callable(getattr(DeepSpeedEngine, key, None)) for key in ds.BATCH_KEYS)  # probe/runinfo.py calls them


def test_no_module_spells_a_default_or_a_unit_table_of_its_own() -> None:
    homes = {ROOT / "zerodoctor" / "deepspeed" / "defaults.py", ROOT / "zerodoctor" / "messages" / "units.py"}
    spelled = re.compile(r"\b(5e8|5e7|1e5|500_000_000|50_000_000)\b|\"train_micro_batch_size_per_gpu\"|1 << 10|2\*\*20")
    offenders = [f"{path.relative_to(ROOT)}:{n}" for path in (ROOT / "zerodoctor").rglob("*.py") if path not in homes
                 for n, line in enumerate(path.read_text().splitlines(), 1) if spelled.search(line.split("#")[0])]
    assert not offenders


@pytest.mark.parametrize(("size", "printed"), [
    (512, "512 bytes"), (KiB, "1024 bytes"), (KiB + 1, "1.00 KiB"), (20 * MiB, "20.00 MiB"),
    (GiB, "1024.00 MiB"), (3 * GiB // 2, "1.50 GiB"), (80 * GiB, "80.00 GiB"),
])
def test_sizes_print_as_pytorchs_format_size(size: int, printed: str) -> None:
    # c10/cuda/CUDACachingAllocator.cpp format_size: "<= 1024 bytes", then KiB, MiB, GiB at two decimals
    assert format_bytes(size) == printed
