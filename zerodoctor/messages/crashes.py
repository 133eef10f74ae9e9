"""Messages, crashes: the text of a fatal error → its family (illegal memory access, host OOM kill, …).

Each family is the set of messages that libraries print for one kind of fault, read from their
sources: c10's ``C10_CUDA_CHECK`` text (``CUDA error: <cudaGetErrorString>``, then "CUDA kernel errors
might be asynchronously reported…"), ATen's ``Expected all tensors to be on the same device`` (1.7+;
``Expected object of device type`` before), c10's ``DefaultCPUAllocator: can't allocate memory`` (``not
enough memory`` before 1.9), ProcessGroupNCCL's ``NCCL error in: <file>:<line>, <ncclGetErrorString>``,
the kernel's OOM killer (``Out of memory: Killed process N (name)``; cgroup v2 ``oom-kill``; slurmstepd's
``Detected N oom-kill event(s)``), glibc's and CPython's fatal-signal lines. A family is ``root`` when it is
a cause, not a consequence: once one rank hits an illegal memory access the others see NCCL errors and
SIGABRTs, and the root names the run's fault. Families are tried in the order below, so the most specific
wins; ``classify`` answers ``None`` for a message no family knows (the caller names it "unknown"). Each
family is one record, the fatal dialect's prefilter and line families derived from it: adding a family is
one record plus its tests (docs/families.md).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from zerodoctor.messages.deferred import deferred


@dataclass(frozen=True)
class Family:
    """One kind of fault, as every library that reports it words it: the one record every reader derives from.

    ``keywords`` are the words the text prefilter (``sources/text.py``) finds a line by that shows the family
    alone, with no exception around it (a killer's, a signal's, a kernel assertion's own line); the fatal
    dialect's prefilter is their union, and it reads a line alone for these families only. A family without
    keywords shows only in an exception's message, found by the exception's type. A keyword starts with a
    capital or a symbol where it can: each common first letter slows every line's prefilter. ``alone``: words
    that name the family on such a line only, never inside a message (a shell's bare "Killed").
    """

    name: str
    pattern: re.Pattern
    root: bool  # a cause in its own right (True) or what other ranks see after one died (False)
    keywords: tuple[bytes, ...] = ()
    alone: re.Pattern | None = None

    @property
    def line(self) -> bool:
        """A line may show it on its own (sources/fatal.py reports such a line once per rank)."""
        return bool(self.keywords)


def _family(name: str, pattern: str, *, root: bool = True, keywords: tuple[bytes, ...] = (),
            alone: str | None = None) -> Family:
    return Family(name, deferred(pattern), root, keywords, deferred(alone) if alone else None)


# Not a fault of the run: the user or the scheduler stopped it, or torchrun reports a child's failure
# (its own traceback names no cause; the child's does).
NOT_A_FAULT = deferred(r"^(?:KeyboardInterrupt|SystemExit|torch\.distributed\.elastic\.multiprocessing\.errors\."
                       r"ChildFailedError|ChildFailedError|subprocess\.CalledProcessError|CalledProcessError|"
                       # torchrun told to stop (SIGTERM/SIGINT/SIGHUP/SIGQUIT: scancel, Ctrl-C),
                       # elastic/multiprocessing/api.py
                       r"(?:torch\.distributed\.elastic\.multiprocessing\.api\.)?SignalException)\b")

# What NCCL returned when a call failed, as ProcessGroupNCCL reports it: "NCCL error: " + ncclGetErrorWithVersion
# (checkForNCCLErrorsInternal), C10D_NCCL_CHECK's "NCCL error in: ", and getNcclErrorDetailStr's result names
# ("ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.",
# NCCL 2.12+ whose ncclGetErrorString says "remote process exited or there was a network error")
NCCL_RESULT = (r"NCCL error:? |\bnccl(?:InternalError|UnhandledCudaError|SystemError|InvalidUsage|InvalidArgument"
               r"|RemoteError)\b")

FAMILIES: tuple[Family, ...] = (
    _family("illegal_memory_access",
            r"illegal memory access|CUDA_ERROR_ILLEGAL_ADDRESS|cudaErrorIllegalAddress"
            r"|illegal instruction was encountered|misaligned address",
            keywords=(b"CUDA error", b"THCudaCheck", b"IllegalAddress", b"Cuda failure")),
    _family("device_side_assert",
            r"device-side assert(?:ion)?s? triggered|cudaErrorAssert"
            r"|\.cu(?:h)?:\d+: [^\n]{0,300}Assertion [^\n]{1,300} failed",
            keywords=(b"CUDA error", b"Assertion")),
    _family("device_mismatch",
            r"Expected all tensors to be on the same device|Expected object of device type \w+ but got device type"
            r"|is on (?:CPU|cpu), but expected (?:it|them) to be on GPU"
            r"|Expected tensor for argument #\d+ '\w+' to have "
            r"the same device|Input type \([\w.]+\) and weight type \([\w.]+\) should be the same"
            r"|indices should be either on cpu or on the same device|is not on the expected device"),
    # the caching allocator's "CUDA out of memory. Tried to allocate …" (its numbers are sources/torch.py's), and
    # C10_CUDA_CHECK's "CUDA error: out of memory" (cudaErrorMemoryAllocation: a CUDA call outside the allocator),
    # which a C++ thread or libtorch prints with no Python type before it ("  what():  CUDA error: out of memory",
    # c10/cuda/CUDAException.cpp, c10/util/Exception.cpp): a line may show it alone
    _family("cuda_oom", r"CUDA out of memory\.|OutOfMemoryError: CUDA|CUDA error: out of memory",
            keywords=(b"CUDA error",)),
    _family("host_alloc_failed",
            r"(?:^|\b)MemoryError\b|std::bad_alloc|DefaultCPUAllocator: (?:can't allocate memory|not enough memory)"
            r"|\[Errno 12\] Cannot allocate memory|Unable to allocate [\d.]+ [KMGT]i?B for an array"
            r"|posix_memalign\([^)]*\) == 0\. 12 vs 0"
            r"|memory allocation of \d+ bytes failed",  # Rust's global allocator (tokenizers, safetensors)
            keywords=(b"::bad_alloc", b"DefaultCPUAllocator", b"bytes failed")),
    # the kernel's and the scheduler's own words; Ray's list of *possible* causes of a dead actor ("killed by
    # SIGKILL by OOM killer due to high memory usage" among others) is no evidence (ZD405's doc)
    _family("host_oom_kill",
            r"Out of memory: Kill(?:ed)? process|oom-kill event|invoked oom-killer|Memory cgroup out of memory"
            r"|oom_kill_process|Killed process \d+ \(\S+\) total-vm"
            # mm/oom_kill.c dump_oom_summary (4.19+): "oom-kill:constraint=%s,nodemask=%*pbl", the constraint one of
            # CONSTRAINT_NONE/CPUSET/MEMORY_POLICY/MEMCG; matched from "=" on, so a line begun after "oom-kill:" counts
            r"|=CONSTRAINT_[A-Z_]+,nodemask="
            # torch/csrc/DataLoader.cpp: "DataLoader worker (pid {}) is killed by signal: {}. ", strsignal(SIGKILL)
            r"|DataLoader worker \(pid \d+\) is killed by signal: Killed"
            # Slurm: slurmstepd's "Detected N oom_kill event in StepId=J.S" (23.02+, before "oom-kill event(s)") and
            # srun's own "%s: task %s: Out Of Memory" (hosts, tasks; srun/launch.c) for the step's killed tasks
            r"|oom_kill events? in |: tasks? [\d,\[\]-]+: Out Of Memory",
            keywords=(b"Killed", b"Detected ", b"Memory cgroup", b"Out of memory", b"Out Of Memory", b"=CONSTRAINT_"),
            # A process SIGKILLed, in a shell's words: the bare "Killed" (an interactive shell, dash), or bash's report
            # of a foreground job in a script (jobs.c notify_of_job_status: "%s: line %d: ", then pretty_print_job's
            # "%5ld" pid and the signal's description), the name the shell's or the script's ("/bin/bash", "bash",
            # "train.sh"), anywhere in the line (a timestamp or a rank prefix before it).
            alone=r"^\s*Killed\b|\S+: line \d+: +\d+ Killed\b"),
    # op_builder/async_io.py: DeepSpeed's NVMe op needs libaio (headers to build, the .so to load)
    _family("async_io_unavailable",
            r"Unable to (?:pre-compile|JIT load) (?:the )?async_io|libaio\.so[\w.]*: cannot open"),
    _family("nvcc_arch_unsupported", r"nvcc fatal\s*: Unsupported gpu architecture",
            keywords=(b"Unsupported gpu",)),
    _family("missing_shared_library",
            r"lib[\w.+-]*\.so[\w.]*: cannot open shared object file|undefined symbol: \w|cannot open shared object file"
            r"|Could not load library lib\w+|DLL load failed",
            keywords=(b": undefined symbol", b": cannot open shared")),
    # runtime/config_utils.py DeepSpeedConfigModel (extra="forbid") and its sections, pydantic v1 and v2 alike:
    # "N validation error(s) for DeepSpeedZeroConfig" then the keys ("extra fields not permitted" /
    # "Extra inputs are not permitted"): DeepSpeed refused the config before any step
    _family("deepspeed_config_rejected",
            r"\d+ validation errors? for (?:DeepSpeed\w|HybridEngineConfig|ZenFlowConfig|TPTrainingConfig"
            r"|CommsLoggerConfig|DSModuleConfig)"),  # "DeepSpeed…" alone: a terminal may cut the class name
    # accelerate's utils/dataclasses.py, DeepSpeedPlugin.__post_init__ (HF Trainer's --deepspeed goes through it):
    # a config without "zero_optimization", which DeepSpeed itself runs as stage 0
    _family("zero_section_missing", r"Please specify the ZeRO optimization config in the DeepSpeed config"),
    # trl/trainer/grpo_trainer.py, grpo_config.py (rloo_config.py alike since 0.22): the batch GRPO generates for
    # must hold whole groups of num_generations completions. "The global train batch size (P x B) must be evenly
    # divisible by the number of generations per prompt (N)" 0.15-0.16, "The effective train batch size (P x B x G)
    # ..." 0.17-0.19 (eval: "global"/"effective eval batch size"), "generation_batch_size (G) must be divisible by
    # the global batch size (P*B)." 0.18+, "... by num_generations (N)." 0.20+, "The global eval batch size (B * P)
    # must be divisible by the number of generations used for evaluation (N)." 0.27+ (none before 0.15). Matched
    # from ") must be" on: the sentence's head differs in every version, its tail does not
    _family("trl_generations_indivisible",
            r"\) must be (?:evenly )?divisible by "
            r"(?:the number of generations|num_generations \(|the global batch size \()"),
    # CPython's words for an operator its operands' types do not have: Objects/object.c do_richcompare "'%s' not
    # supported between instances of '%.100s' and '%.100s'" (3.6+), Objects/abstract.c binop_type_error
    # "unsupported operand type(s) for %.100s: '%.100s' and '%.100s'", unicodeobject.c "can only concatenate str
    # (not \"%.200s\") to str" (3.7+). Text on one side, a number on the other: a value read as text where a
    # number was meant. Raised inside DeepSpeed (``fatal.raised_library``), a config value: an "auto" nothing
    # filled, a number in quotes (DeepSpeed#1270's gradient_clipping)
    _family("text_used_as_number",
            r"not supported between instances of '(?:str' and '(?:int|float)|(?:int|float)' and 'str)'"
            r"|unsupported operand type\(s\) for [^:']{1,12}: '(?:str' and '(?:int|float)|(?:int|float)' and 'str)'"
            r"|can only concatenate str \(not \"(?:int|float)\"\) to str"),
    # c10d's ProcessGroupWrapper (TORCH_DISTRIBUTED_DEBUG=DETAIL, torch/csrc/distributed/c10d/ProcessGroupWrapper.cpp):
    # before each collective the ranks allgather a fingerprint of it and one that finds another's different raises,
    # instead of the hang that follows without DETAIL. 1.9-1.10 (torch/lib/c10d): "Detected mismatch between
    # collectives on ranks. Rank %d is running inconsistent collective: CollectiveFingerPrint(OpType=…"; later "…
    # Rank %d is running collective: CollectiveFingerPrint(SequenceNumber=%d, OpType=…), but Rank %d is running
    # collective: …" and "Collectives differ in the following aspects: …". The fingerprint's head survives a cut
    # that takes the sentence's start (signals/mismatch.py reads the rest)
    _family("collective_mismatch",
            r"Detected mismatch between collectives on ranks"
            r"|is running (?:inconsistent )?collective: CollectiveFingerPrint\(",
            keywords=(b"Detected ", b"CollectiveFingerPrint(")),
    _family("missing_module", r"ModuleNotFoundError: No module named|ImportError: No module named"
            r"|ImportError: cannot import name|No module named '[\w.]+'"),
    _family("nonfinite_loss",
            r"Loss became infinite or NaN|(?i:(?<![a-z])loss\b['\"\]]?(?:\s+is)?\s*[:=]?\s*['\"]?(?:nan|[-+]?inf)\b)"
            r"|(?i:\bnan loss\b|non-finite loss|loss is not finite)",
            # a NaN loss in a progress line, found through "=nan" / ": nan" / "] nan" and not a lower-case "nan"
            keywords=(b"=nan", b"= nan", b": nan", b"] nan", b"loss nan", b"Loss nan", b"loss inf", b"Loss inf",
                      b"NaN")),
    # DeepSpeed's own cuBLAS/rocBLAS GEMM wrappers (csrc/transformer/cublas_wrappers.cu, the training kernels, 0.2.0+;
    # inference_cublas_wrappers.h 0.7.3+; inference v2 blas_utils.h 0.12+) print a failed status to stderr and go on:
    # "!!!! kernel execution error.\n" (0.2.0-0.3.0), then "!!!! kernel execution error. (m: %d, n: %d, k: %d,
    # error: %d) \n" and the strided-batched "(batch: %d, m: …" (0.3.1+, f0f2a7026); the status is cublasStatus_t's
    # number (13 = CUBLAS_STATUS_EXECUTION_FAILED)
    _family("cuda_error",
            r"CUBLAS_STATUS_\w+|CUDNN_STATUS_\w+|cuDNN error|no kernel image is available for execution"
            r"|CUDA driver version is insufficient|unspecified launch failure|uncorrectable ECC error"
            r"|CUDA error: [a-z]|cudaError\w+|CUDA-capable device\(s\) is/are busy or unavailable"
            r"|Found no NVIDIA driver|nvcc fatal\s*:|cublas runtime error|cuda runtime error \(\d+\)"
            r"|!!!! kernel execution error\.",
            keywords=(b"CUDA error", b"CUBLAS_STATUS", b"CUDNN_STATUS", b"THCudaCheck", b"Cuda failure",
                      b"!!!! kernel execution error")),
    # torch/csrc/DataLoader.cpp: a DataLoader worker's SIGBUS handler ("ERROR: Unexpected bus error encountered in
    # worker. This might be caused by insufficient shared memory (shm).") and the main process finding the worker
    # dead ("DataLoader worker (pid N) is killed by signal: Bus error. It is possible that dataloader's workers are
    # out of shared memory. Please try to raise your shared memory limit.", an ostringstream, later fmt::format, the
    # same words, the hint added for SIGBUS alone, so the head "is killed by signal: Bus error" says it where a
    # terminal cut the hint off). Before native_crash: its "Bus error" is a full /dev/shm, not a compiled extension's.
    _family("dataloader_shm", r"Unexpected bus error encountered in worker|insufficient shared memory \(shm\)"
            r"|workers are out of shared memory|DataLoader worker \(pid [\d, ]+\) is killed by signal: Bus error",
            keywords=(b"Bus error", b"Unexpected bus error", b"insufficient shared memory")),
    # A native crash is a cause (the others' NCCL errors and timeouts follow it); SIGABRT is most often an effect
    # (NCCL's watchdog, c10::Error thrown in a destructor) and is read apart, below. A signal's bare name is prose
    # (Ray lists "killed by SIGSEGV or other unexpected errors" among possible causes): only the words of the
    # process that died, or of the launcher reporting it ("Signal 11 (SIGSEGV) received by PID"), count.
    _family("native_crash",
            r"Segmentation fault|\(SIGSEGV\)|SIGSEGV received|received signal SIGSEGV|Bus error|\(SIGBUS\)"
            r"|Floating[ -]point exception|\(SIGFPE\)|Illegal instruction|\(SIGILL\)"
            r"|Fatal Python error: (?:Segmentation|Bus|Floating|Illegal)",
            keywords=(b"Segmentation fault", b"Fatal Python error", b"SIG", b"Bus error",
                      b"Floating point exception")),
    _family("collective_timeout",
            r"Watchdog caught collective operation timeout|timed out in blocking wait|watchdog got stuck"
            # WorkNCCL::handleException's epitaph for any failed work: a timeout unless the NCCL result it announces
            # follows on the same line (a paste that lost its line breaks)
            rf"|Some NCCL operations have failed or timed out(?!.*(?:{NCCL_RESULT}))"
            r"|Timed out waiting \d+ ?ms for|Gloo.{0,80}[Tt]imed out"
            r"|DistStoreError: .{0,80}[Tt]imed out|wait timeout after \d+ ?ms"
            r"|Timed out initializing process group in store based barrier", root=False),
    _family("nccl_error",
            r"NCCL error in: "
            r"|nccl(?:InternalError|UnhandledCudaError|SystemError|InvalidUsage|InvalidArgument|RemoteError)"
            r"|unhandled (?:system|cuda) error, NCCL version|NCCL communicator was aborted|DistBackendError"
            r"|Connection (?:reset|closed) by (?:peer|remote)", root=False,
            keywords=(b"NCCL error",)),
    _family("process_aborted",
            r"\(SIGABRT\)|SIGABRT received|received signal SIGABRT|Aborted \(core dumped\)|Fatal Python error: Aborted"
            r"|terminate called (?:without|after)", root=False,
            keywords=(b"SIG", b"(core dumped)", b"Fatal Python error")),
)
BY_NAME = {f.name: f for f in FAMILIES}
# A traceback's frame as Python prints it: the probe's events and a console log's both keep frames in this form.
FRAME = r'File "([^"]+)", line (\d+), in (\S+)'
UNKNOWN = "unknown"

# Signals by number as torchrun and the launchers report them (a negative exit code, or 128 + N from a shell).
SIGNAL_NAMES = {4: "SIGILL", 6: "SIGABRT", 7: "SIGBUS", 8: "SIGFPE", 9: "SIGKILL", 11: "SIGSEGV", 15: "SIGTERM"}
SIGKILL = 9
FAULT_SIGNALS = {4, 6, 7, 8, 11}  # SIGILL, SIGABRT, SIGBUS, SIGFPE, SIGSEGV: a crash of native code
# No message names it: a rank killed by one of FAULT_SIGNALS after it wrote its run_end, in interpreter
# teardown (launch/rank_deaths.py). Training finished; only the exit status is the crash's.
TEARDOWN_CRASH = "teardown_crash"
SHELL_SIGNAL_BASE = 128  # a shell's exit status for a child killed by signal N


def classify(text: str) -> str | None:
    """The first family whose message ``text`` holds, else ``None``."""
    for family in FAMILIES:
        if family.pattern.search(text):
            return family.name
    return None


def rank_of(family: str) -> int:
    """Order of precedence: root families first, in table order, then the consequences, then unknown."""
    found = BY_NAME.get(family)
    if found is None:
        return 2 * len(FAMILIES)
    index = FAMILIES.index(found)
    return index if found.root else len(FAMILIES) + index


def is_fault(type_name: str) -> bool:
    """An exception that ends a run as a fault (not an interrupt, not a launcher's report of a child)."""
    return not NOT_A_FAULT.match(type_name)


def signal_of(exit_code: int | None, signal: int | None) -> int | None:
    """The signal that killed a process, from a negative exit code, a shell's 128 + N, or the signal itself."""
    if signal:
        return signal
    if exit_code is not None and exit_code < 0:
        return -exit_code
    if exit_code is not None and SHELL_SIGNAL_BASE < exit_code <= SHELL_SIGNAL_BASE + 31:
        return exit_code - SHELL_SIGNAL_BASE
    return None
