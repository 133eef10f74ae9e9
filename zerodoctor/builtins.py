"""Plugins: the core's own parts, registered through the same hooks a plugin uses.

Imports happen inside the hooks so that loading the plugin manager (``zerodoctor --help``)
does not load pydantic or SQLAlchemy.
"""

from __future__ import annotations

from pathlib import Path

from zerodoctor.hookspecs import hookimpl


@hookimpl
def register_sources() -> list[tuple[str, str]]:
    # Events written by the probe are the better evidence; the console is the fallback.
    # A flight recorder dump or a profiler trace beside them is read as well (``pipeline.expand_inputs``).
    from zerodoctor.sources.flight_recorder import DUMP_PATTERN

    return [("rank-*.jsonl", "jsonl"), ("console.log", "text"), (DUMP_PATTERN, "flight-recorder")]


@hookimpl
def register_parsers() -> dict:
    from zerodoctor.sources.flight_recorder import FlightRecorderParser
    from zerodoctor.sources.jsonl import JsonlParser
    from zerodoctor.sources.profiler_trace import ProfilerTraceParser
    from zerodoctor.sources.text import TextParser

    return {"jsonl": JsonlParser, "text": TextParser, "flight-recorder": FlightRecorderParser,
            "chrome-trace": ProfilerTraceParser}


@hookimpl
def register_dialects() -> list[type]:
    from zerodoctor.sources.amp import AmpScalerDialect
    from zerodoctor.sources.crashes import CrashDialect
    from zerodoctor.sources.deepspeed import DeepSpeedDialect
    from zerodoctor.sources.fatal import FatalDialect
    from zerodoctor.sources.hf import HuggingFaceDialect
    from zerodoctor.sources.megatron import MegatronDialect
    from zerodoctor.sources.nccl import NcclDialect
    from zerodoctor.sources.stackdump import StackDumpDialect
    from zerodoctor.sources.torch import TorchDialect

    return [DeepSpeedDialect, TorchDialect, NcclDialect, HuggingFaceDialect, MegatronDialect, CrashDialect,
            FatalDialect, StackDumpDialect, AmpScalerDialect]


@hookimpl
def register_signals() -> list:
    from zerodoctor.signals import (amp, batch, comms, config, crashes, creep, evidence, fatal, hang, memory,
                                    numerics, offload, run, stacks, straggler, trace, trainer)

    # Order matters: a module may read what earlier ones computed; evidence sums up last.
    return [run, batch, numerics, amp, comms, trace, memory, creep, offload, config, hang, straggler, trainer, crashes,
            fatal, stacks, evidence]


@hookimpl
def register_rules() -> list[Path]:
    from zerodoctor.rulebook.loader import builtin_rules_dir

    return [builtin_rules_dir()]
