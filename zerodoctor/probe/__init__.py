"""Probe: inside the training process, DeepSpeed engine → events in ``runs/<id>/rank-<r>.jsonl``.

``zerodoctor run`` injects it with no code change (``bootstrap``: a ``sitecustomize`` that
patches ``deepspeed.initialize`` when a process imports deepspeed); ``attach`` is the same
probe for code that wants to call it explicitly. This module stays import-light: it runs
at interpreter start in every process of the job, most of which never train.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

STARTED = time.time()  # imported at interpreter start by the injected sitecustomize: ~ the process's start
RUN_DIR_ENV = "ZERODOCTOR_RUN_DIR"
RUN_ID_ENV = "ZERODOCTOR_RUN_ID"


def attach(engine: Any, run_dir: str | Path | None = None, *, config: Any = None, run_id: str | None = None) -> Any:
    """Instrument a ``DeepSpeedEngine``: every optimizer step becomes a ``step`` event.

    Args:
        engine: what ``deepspeed.initialize`` returned first.
        run_dir: where ``rank-<r>.jsonl`` goes; default ``$ZERODOCTOR_RUN_DIR``.
        config: the DeepSpeed config as the user passed it (dict or JSON path), recorded
            in ``run_start``; default the engine's own config dict.
        run_id: default the run directory's name.

    Returns:
        The ``EngineProbe``; training works the same whether or not anyone keeps it.
    """
    from zerodoctor.probe.engine import attach_engine

    return attach_engine(engine, run_dir, config=config, run_id=run_id)
