"""Sources as the core's own plugin: the file patterns, parsers and console dialects, registered
through the same hooks a third-party package uses (``plugins.DEFAULT_PLUGINS``).

Imports happen inside the hooks, so loading the plugin manager (``zerodoctor --help``) loads no parser.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any, Callable

from zerodoctor.plugins.hookspecs import hookimpl


@hookimpl
def register_sources() -> list[tuple[str, str]]:
    # Events written by the probe are the better evidence; the console is the fallback.
    # A flight recorder dump or a profiler trace beside them is read as well (``pipeline.expand_inputs``).
    # ``rank-*`` is a rank's number (``names.named_by``): a copy such as rank-0.1.jsonl is no rank's file.
    from zerodoctor.sources.flight_recorder import DUMP_PATTERN
    from zerodoctor.sources.names import RANK_EVENTS, WRAPPER_EVENTS

    # the wrapper's own events are read beside whichever of the others wins (batches.run_files)
    return [(RANK_EVENTS, "jsonl"), ("console.log", "text"), (DUMP_PATTERN, "flight-recorder"),
            (WRAPPER_EVENTS, "jsonl")]


@hookimpl
def register_parsers(run_id: str | None, path: Path | None) -> dict[str, Callable[[], Any]]:
    from zerodoctor.sources.csv_monitor import CsvMonitorParser
    from zerodoctor.sources.flight_recorder import FlightRecorderParser
    from zerodoctor.sources.jsonl import JsonlParser
    from zerodoctor.sources.profiler_trace import ProfilerTraceParser
    from zerodoctor.sources.tensorboard_events import TensorBoardParser
    from zerodoctor.sources.text import TextParser

    # a flight recorder dump's rank and a trace's are in its file name
    return {"jsonl": partial(JsonlParser, run_id), "text": partial(TextParser, run_id),
            "flight-recorder": partial(FlightRecorderParser, run_id, path=path),
            "chrome-trace": partial(ProfilerTraceParser, run_id, path=path),
            "csv-monitor": partial(CsvMonitorParser, run_id, path=path),
            "tensorboard": partial(TensorBoardParser, run_id, path=path)}


@hookimpl
def register_dialects() -> list[type]:
    from zerodoctor.sources.amp import AmpScalerDialect
    from zerodoctor.sources.crashes import CrashDialect
    from zerodoctor.sources.deepspeed import DeepSpeedDialect
    from zerodoctor.sources.fatal import FatalDialect
    from zerodoctor.sources.gpu_table import GpuTableDialect
    from zerodoctor.sources.hf import HuggingFaceDialect
    from zerodoctor.sources.megatron import MegatronDialect
    from zerodoctor.sources.nccl import NcclDialect
    from zerodoctor.sources.stackdump import StackDumpDialect
    from zerodoctor.sources.torch import TorchDialect

    return [DeepSpeedDialect, TorchDialect, NcclDialect, HuggingFaceDialect, MegatronDialect, CrashDialect,
            FatalDialect, StackDumpDialect, AmpScalerDialect, GpuTableDialect]
