"""Sources, text: the GPU rows of ``nvidia-smi``'s table → one ``log`` event ``gpu`` naming the device.

A console log rarely names its GPU: DeepSpeed, Megatron and torch print no device name, and a model FLOPs
utilisation needs the GPU's peak (``signals/throughput.py``). People paste ``nvidia-smi`` beside their logs, and
Slurm scripts run it first; its table gives each GPU a row ``|   0  <name>  On | 00000000:07:00.0 Off | …``:
the index, the name (cut to ``NVIDIA A100 80G...`` in the narrow column of drivers before 525), the persistence
mode, then the bus id. nvidia-smi's source is not public: the rows read here are real pastes' (DeepSpeedExamples
#475, driver 530; SparK#8, 450; DeepSpeedExamples#310, 470; ``tests/sources/test_gpu_table.py``). One event per
name: a table printed every minute names its GPU once.
"""

from __future__ import annotations


from zerodoctor.events import Event
from zerodoctor.messages.deferred import deferred
from zerodoctor.sources.text import Context, Line

_ROW = deferred(r"\|\s+\d+\s+(\S.*?)\s+(?:On|Off)\s*\|\s*[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d")


class GpuTableDialect:
    name = "nvidia-smi"
    keywords = (b"| 0000",)  # the bus id's domain, right after the persistence mode's column
    holding = False

    def __init__(self, context: Context) -> None:
        self.context = context
        self._named: set[str] = set()

    def feed(self, line: Line) -> list[Event]:
        match = _ROW.search(line.text)
        if match is None or match.group(1) in self._named:
            return []
        name = match.group(1)
        self._named.add(name)
        return [self.context.event("log", line, message=name, source=self.name, what="gpu",
                                   data={"device_name": name})]

    def finish(self) -> list[Event]:
        return []
