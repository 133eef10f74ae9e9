"""Messages, signatures: the one message a library prints when a known fault stops the run → its name and numbers.

A signature is narrower than a crash family (``messages/crashes.py``): one message, one fault, one rule
(ZD6xx/ZD8xx/ZD9xx word it), matched wherever it appears, whatever wraps it (a traceback, a rich box, a
``[rankN]:`` prefix, an issue quote). Each record holds its pattern, the keywords the text prefilter
(``sources/text.py``) finds its line by — the crash dialect's prefilter is their union, and a pattern is
searched only on a line that holds one — what the match gives (numbers, a header's name), and whether it counts
only where DeepSpeed is in the traceback (a message other software prints too). Signatures are tried in
order; the first one a line holds is that line's.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from zerodoctor.messages.deferred import deferred
from zerodoctor.messages.numbers import NUM


@dataclass(frozen=True)
class Signature:
    name: str
    pattern: re.Pattern[str]
    keywords: tuple[bytes, ...]
    read: Callable[[re.Match[str]], dict[str, Any]] | None = None  # what the match gives, in the event's data
    needs_deepspeed: bool = False  # other software prints it too: counts only with DeepSpeed in the traceback


def _ints(*names: str) -> Callable[[re.Match[str]], dict[str, Any]]:
    return lambda m: {name: int(v) for name, v in zip(names, m.groups())}


def _signature(name: str, pattern: str, keywords: tuple[bytes, ...], **more: Any) -> Signature:
    return Signature(name, deferred(pattern), keywords, **more)


SIGNATURES: tuple[Signature, ...] = (
    # optimizer ops called with a number written as a string: pybind's "Invoked with: …, '1e-5', …" (csrc/adam's
    # create_adam, multi_tensor_adam); the crash dialect also reads the argument list's next lines
    _signature("optimizer_string_hyperparameter", rf"Invoked with:.*?'{NUM}'", (b"Invoked with:",)),
    # torch.nn.Module.load_state_dict's "copying a param with shape torch.Size([0]) from checkpoint" (a checkpoint
    # saved without gathering) and empty "tensor([])" weights printed from a saved state dict. Size([1]): ZeRO-3
    # before 0.6 left one-element placeholders where it now leaves empty tensors; a real one-element parameter
    # never meets a current shape larger than [1].
    _signature("checkpoint_weights_empty",
               r"copying a param with shape torch\.Size\(\[0\]\) from checkpoint|weight'[:,] tensor\(\[\]"
               r"|copying a param with shape torch\.Size\(\[1\]\) from checkpoint, the shape in current model is "
               r"torch\.Size\(\[(?!1\])\d", (b"Size([0])", b"Size([1])", b"([], device")),
    # weights loaded into a model zero.Init partitioned: load_state_dict's "… the shape in current model is
    # torch.Size([0])", Transformers' "found shape … in the checkpoint and torch.Size([0])"
    _signature("model_weights_partitioned",
               r"the shape in current model is torch\.Size\(\[0\]\)|in the checkpoint and torch\.Size\(\[0\]\)",
               (b"Size([0])",)),
    # runtime/engine.py's "ZeRORuntimeException: The checkpoint being loaded used a DP world size of A but the
    # current world size is B"
    _signature("resumed_on_other_world_size",
               r"used a DP world size of (\d{1,9}) but the current world size is (\d{1,9})\b", (b"DP world size",),
               read=_ints("saved_world_size", "world_size")),
    # DeepSpeed too old for torch 2, raised from DeepSpeed's own import
    _signature("deepspeed_imports_torch_six", r"No module named 'torch\._six'", (b"_six'",), needs_deepspeed=True),
    # op builds: torch/utils/cpp_extension.py, op_builder/builder.py, the compiler's missing CUDA header
    _signature("ninja_missing", r"Ninja is required to load C\+\+ extensions", (b"Ninja is required",)),
    _signature("cuda_home_missing", r"CUDA_HOME does not exist, unable to compile CUDA op", (b"CUDA_HOME does not",)),
    _signature("cuda_header_missing", r"fatal error: ((?:cuda|cu|nv)\w*\.h): No such file or directory",
               (b": No such file or directory",), read=lambda m: {"header": m.group(1)}),
    # torch/utils/checkpoint.py's CheckpointError whose recomputed tensors have torch.Size([0]) (a ZeRO-3
    # parameter released before the recompute)
    _signature("zero3_recompute_mismatch", r"recomputed metadata: \{'shape': torch\.Size\(\[0\]\)", (b"Size([0])",)),
    # NVMe offload: csrc/aio's "buffer nbytes != file bytes A != B"
    _signature("aio_short_read", r"buffer nbytes != file bytes (\d{1,18}) != (\d{1,18})\b", (b"!= file bytes",),
               read=_ints("buffer_bytes", "file_bytes")),
    # host memory: Ray's memory monitor killing a worker, with its pointer to ray-oom-prevention
    _signature("ray_memory_monitor_kill",
               r"Task was killed due to the node running low on memory|/ray-core/scheduling/ray-oom-prevention",
               (b"Task was killed due to the node", b"/ray-core/scheduling")),
    # NVMe offload: runtime/swap_tensor/partitioned_param_swapper.py's "Not enough buffers A for swapping B"
    _signature("swap_buffers_exhausted", r"Not enough buffers (\d{1,9}) for swapping (\d{1,9})\b",
               (b"Not enough buffers",), read=_ints("free_buffers", "wanted_buffers")),
)
