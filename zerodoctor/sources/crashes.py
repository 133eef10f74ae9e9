"""Sources, text: the messages of known crashes and start-up stalls → ``log`` events ``crash`` and ``extension``.

Each signature is one message a library prints when a known fault stops the run, matched where
it appears, whatever wraps it (a traceback, a rich box, a ``[rankN]:`` prefix, an issue quote):
- optimizer ops called with a number written as a string: pybind's ``Invoked with: …, '1e-5', …``
  (``csrc/adam``'s ``create_adam``, ``multi_tensor_adam``);
- weights and ZeRO-3 partitions: ``torch.nn.Module.load_state_dict``'s ``copying a param with shape
  torch.Size([0]) from checkpoint`` (a checkpoint saved without gathering) or ``… the shape in current
  model is torch.Size([0])`` (weights loaded into a model ``zero.Init`` partitioned; ``Size([1])`` placeholders
  before DeepSpeed 0.6), Transformers'
  ``found shape … in the checkpoint and torch.Size([0])``, and empty ``tensor([])`` weights printed from
  a saved state dict;
- ``runtime/engine.py``'s ``ZeRORuntimeException: The checkpoint being loaded used a DP world size of
  A but the current world size is B``;
- DeepSpeed too old for torch 2: ``No module named 'torch._six'`` raised from DeepSpeed's own import;
- op builds: ``torch/utils/cpp_extension.py``'s ``Ninja is required to load C++ extensions``,
  ``op_builder/builder.py``'s ``CUDA_HOME does not exist, unable to compile CUDA op(s)`` and the
  compiler's ``fatal error: cuda….h: No such file or directory``;
- ``torch/utils/checkpoint.py``'s ``CheckpointError`` whose recomputed tensors have ``torch.Size([0])``
  (a ZeRO-3 parameter released before the recompute);
- host memory: Ray's memory monitor killing a worker (``Task was killed due to the node running low on
  memory``, with its pointer to ``ray-oom-prevention``);
- NVMe offload: ``csrc/aio``'s ``buffer nbytes != file bytes A != B`` and
  ``runtime/swap_tensor/partitioned_param_swapper.py``'s ``Not enough buffers A for swapping B``.
The JIT build lock (``torch/utils/file_baton.py``) is read as ``extension`` events: ``root`` for
``Using … as PyTorch extensions root...``, ``ready`` once a build or load follows, ``waiting`` for a
stack dump caught in ``file_baton.py``'s ``wait``; a rank whose last word is ``root`` is waiting on it.
Each crash signature is reported once per rank.
"""

from __future__ import annotations

import re
from typing import Any, Callable

from zerodoctor.events import Event
from zerodoctor.messages.numbers import NUM
from zerodoctor.sources.text import Context, Line, strip_prefix

_QUOTED_NUMBER = re.compile(rf"'({NUM})'")


def _ints(*names: str) -> Callable[[re.Match], dict[str, Any]]:
    return lambda m: {name: int(v) for name, v in zip(names, m.groups())}


# (signature, regex, what the match gives). The regexes are searched only on lines holding a keyword.
SIGNATURES: list[tuple[str, re.Pattern, Callable[[re.Match], dict[str, Any]] | None]] = [
    ("optimizer_string_hyperparameter", re.compile(rf"Invoked with:.*?'{NUM}'"), None),
    # Size([1]): ZeRO-3 before 0.6 left one-element placeholders where it now leaves empty tensors; a real
    # one-element parameter never meets a current shape larger than [1].
    ("checkpoint_weights_empty", re.compile(
        r"copying a param with shape torch\.Size\(\[0\]\) from checkpoint|weight'[:,] tensor\(\[\]"
        r"|copying a param with shape torch\.Size\(\[1\]\) from checkpoint, the shape in current model is "
        r"torch\.Size\(\[(?!1\])\d"), None),
    ("model_weights_partitioned", re.compile(
        r"the shape in current model is torch\.Size\(\[0\]\)|in the checkpoint and torch\.Size\(\[0\]\)"), None),
    ("resumed_on_other_world_size", re.compile(
        r"used a DP world size of (\d{1,9}) but the current world size is (\d{1,9})\b"),
     _ints("saved_world_size", "world_size")),
    ("deepspeed_imports_torch_six", re.compile(r"No module named 'torch\._six'"), None),
    ("ninja_missing", re.compile(r"Ninja is required to load C\+\+ extensions"), None),
    ("cuda_home_missing", re.compile(r"CUDA_HOME does not exist, unable to compile CUDA op"), None),
    ("cuda_header_missing", re.compile(r"fatal error: ((?:cuda|cu|nv)\w*\.h): No such file or directory"),
     lambda m: {"header": m.group(1)}),
    ("zero3_recompute_mismatch", re.compile(r"recomputed metadata: \{'shape': torch\.Size\(\[0\]\)"), None),
    ("aio_short_read", re.compile(r"buffer nbytes != file bytes (\d{1,18}) != (\d{1,18})\b"),
     _ints("buffer_bytes", "file_bytes")),
    ("ray_memory_monitor_kill", re.compile(
        r"Task was killed due to the node running low on memory|/ray-core/scheduling/ray-oom-prevention"), None),
    ("swap_buffers_exhausted", re.compile(r"Not enough buffers (\d{1,9}) for swapping (\d{1,9})\b"),
     _ints("free_buffers", "wanted_buffers")),
]
# A signature whose message other software prints too counts only where DeepSpeed is in the traceback.
NEEDS_DEEPSPEED = {"deepspeed_imports_torch_six"}

_EXT_ROOT = re.compile(r"Using\s+\S.* as PyTorch extensions root")
INVOKED_LINES = 4  # pybind prints the arguments' reprs, which wrap (a tensor's repr spans lines)
_EXT_READY = ("Emitting ninja build file", "Building extension module", "Loading extension module",
              "No modifications detected for re-loaded extension")
_EXT_WAITING = "torch/utils/file_baton.py"


class CrashDialect:
    name = "crash"
    # Upper-case or symbol starts keep the prefilter cheap (sources/text.py).
    keywords = (b"Invoked with:", b"!= file bytes", b"Size([0])", b"Size([1])", b"([], device", b"DP world size",
                b"_six'", b"Ninja is required",
                b"CUDA_HOME does not", b": No such file or directory", b"Not enough buffers",
                b"PyTorch extensions root", b"Emitting ninja", b"Building extension", b"Loading extension",
                b"No modifications detected", b"_baton.py", b"Task was killed due to the node", b"/ray-core/scheduling")

    def __init__(self, context: Context) -> None:
        self.context = context
        self._reported: set[tuple[str, int]] = set()
        self._waiting_ranks: set[int] = set()
        self._invoked = 0  # lines left in an "Invoked with:" argument list still being read

    @property
    def holding(self) -> bool:
        return self._invoked > 0

    def feed(self, line: Line) -> list[Event]:
        text = line.text
        if self._invoked:
            self._invoked -= 1
            if _QUOTED_NUMBER.search(text):
                self._invoked = 0
                return self._report(line, text, "optimizer_string_hyperparameter", {})
        elif "Invoked with:" in text and not _QUOTED_NUMBER.search(text):
            self._invoked = INVOKED_LINES
            return []
        if "extensions root" in text or "extension" in text or _EXT_WAITING in text:
            out = self._extension(line, text)
            if out is not None:
                return out
        for signature, pattern, reader in SIGNATURES:
            match = pattern.search(text)
            if match is None:
                continue
            if signature in NEEDS_DEEPSPEED and not self._deepspeed_nearby(text):
                continue
            return self._report(line, text, signature, reader(match) if reader else {})
        return []

    def _report(self, line: Line, text: str, signature: str, found: dict[str, Any]) -> list[Event]:
        rank = line.rank if line.rank is not None else 0
        if (signature, rank) in self._reported:
            return []
        self._reported.add((signature, rank))
        return [self.context.event("log", line, message=text.strip()[:500], source=self.name, level="ERROR",
                                   what="crash", data={"signature": signature, **found}, step=self.context.last_step())]

    def finish(self) -> list[Event]:
        return []

    def _extension(self, line: Line, text: str) -> list[Event] | None:
        if _EXT_ROOT.search(text):
            state = "root"
        elif any(s in text for s in _EXT_READY):
            state = "ready"
        elif _EXT_WAITING in text and "wait" in text:
            rank = line.rank if line.rank is not None else 0
            if rank in self._waiting_ranks:
                return []
            self._waiting_ranks.add(rank)
            state = "waiting"
        else:
            return None
        return [self.context.event("log", line, message=text.strip()[:500], source=self.name, what="extension",
                                   data={"state": state})]

    def _deepspeed_nearby(self, text: str) -> bool:
        """DeepSpeed on this line or in the traceback lines just before it."""
        return "deepspeed" in text or any("deepspeed" in strip_prefix(raw)[1] for raw in self.context.lookback())
