"""Test-only shim: DeepSpeed's CPU accelerator reports fp16 as supported.

DeepSpeed refuses fp16 on ``DS_ACCELERATOR=cpu``; with this shim the real
``DynamicLossScaler`` and fp16 optimizers run on CPU (overflow checks, skipped steps,
halving, the min-scale exception), which is all the fp16 tests and samples need.
"""

from __future__ import annotations


def install() -> None:
    from deepspeed.accelerator.cpu_accelerator import CPU_Accelerator

    CPU_Accelerator.is_fp16_supported = lambda self: True
