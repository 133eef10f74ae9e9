"""Crash messages of training runs, built from the format strings in the libraries' own source, per version.

The expectations ``test_message_families.py`` holds the console-log detectors to, written from the source before
the detectors for most of these families existed (docs/logs.md, "Message families and the versions they cover",
has the table with the commits). None of this was pasted by anyone: each message is a library's format string
filled with realistic values, exactly as that library version prints it; how a console wraps it is the test's
part. Only the exception text comes from a library: the traceback frames above it are the kind a training
script prints, there to make the log look like one.

Versions are releases, ``a-b`` inclusive: DeepSpeed's tags; for PyTorch the ``version.txt`` at the commit that
changed the string (``1.10.0a0`` there means the change shipped in 1.10). "latest" is PyTorch's newest source
read (the 2.8+ ProcessGroupNCCL and allocator), "2.13" the torch installed here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Message:
    """One crash as a library version prints it.

    ``records`` are what the libraries write, in order: log records and, last, the exception; a record may span
    lines. When ``frames`` is set, Python printed that traceback head just before the last record, which is then
    ``ExceptionType: text``.
    """

    family: str
    rule: str
    versions: str
    source: str
    records: tuple[str, ...]
    frames: tuple[str, ...] = ()
    variant: str = ""

    @property
    def id(self) -> str:
        label = f"{self.family}-{self.versions}" + (f"-{self.variant}" if self.variant else "")
        return re.sub(r"[^A-Za-z0-9.+-]+", "_", label)


def traceback(*calls: tuple[str, int, str, str]) -> tuple[str, ...]:
    """Python's traceback head: ``(path, line, function, source line)`` per frame, outermost first."""
    lines = ["Traceback (most recent call last):"]
    for path, line, func, code in calls:
        lines += [f'  File "{path}", line {line}, in {func}', f"    {code}"]
    return tuple(lines)


SITE = "/usr/local/lib/python3.10/site-packages"
SCRIPT = ("/workspace/train.py", 212, "<module>", "main()")
STEP = ("/workspace/train.py", 187, "main", "loss = engine(batch)")
FORWARD = traceback(SCRIPT, STEP, (f"{SITE}/torch/nn/modules/module.py", 1501, "_call_impl",
                                   "return forward_call(*args, **kwargs)"))
BACKWARD = traceback(SCRIPT, ("/workspace/train.py", 190, "main", "engine.backward(loss)"),
                     (f"{SITE}/torch/autograd/__init__.py", 200, "backward",
                      "Variable._execution_engine.run_backward(  # Calls into the C++ engine to run the backward pass"))
ALL_REDUCE = traceback(SCRIPT, ("/workspace/train.py", 190, "main", "engine.backward(loss)"),
                       (f"{SITE}/torch/distributed/distributed_c10d.py", 1287, "all_reduce", "work.wait()"))


# --- CUDA caching allocator OOM: c10/cuda/CUDACachingAllocator.cpp -------------------------------------------------

# format_size() prints two decimals and KiB/MiB/GiB. Per scenario: request, capacity, free, allocated, reserved but
# unallocated, and what this process holds on the device in all (2.1+). Capacity: under 3 % of the device stranded.
# Fragmentation: far more stranded than the request.
V100_CAPACITY = dict(req="64.00 MiB", total="31.75 GiB", free="18.44 MiB", alloc="30.12 GiB", stranded="101.22 MiB",
                     reserved="30.22 GiB")
V100_FRAGMENTED = dict(req="1.50 GiB", total="31.75 GiB", free="1.13 GiB", alloc="22.41 GiB", stranded="7.65 GiB",
                       reserved="30.06 GiB")
A100_CAPACITY = dict(req="2.00 GiB", total="79.15 GiB", free="1.23 GiB", alloc="76.80 GiB", stranded="308.00 MiB",
                     process="77.90 GiB")
A100_FRAGMENTED = dict(req="2.00 GiB", total="79.15 GiB", free="1.06 GiB", alloc="61.52 GiB", stranded="15.38 GiB",
                       process="78.07 GiB")
OOM_HINT_1_10 = (" If reserved memory is >> allocated memory try setting max_split_size_mb to avoid"
                 " fragmentation.  See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF")
OOM_HINT_2_1 = (" If reserved but unallocated memory is large try setting max_split_size_mb to avoid"
                " fragmentation.  See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF")
OOM_HINT_2_4 = (" If reserved but unallocated memory is large try setting"
                " PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid"
                " fragmentation.  See documentation for Memory Management "
                " (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)")
OOM_HINT_LATEST = (" If reserved but unallocated memory is large try setting"
                   " PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid"
                   " fragmentation.  See documentation for Memory Management "
                   " (https://docs.pytorch.org/docs/stable/notes/cuda.html"
                   "#optimizing-memory-usage-with-pytorch-cuda-alloc-conf)")


def _oom_parenthesis(n: dict, tail: str, allowed: str = "") -> str:
    """The ``(GPU 0; ...)`` form, 1.0-2.0; ``tail`` closes it: ``... cached)`` or ``... reserved in total ...)``."""
    return (f"CUDA out of memory. Tried to allocate {n['req']} (GPU 0; {n['total']} total capacity; "
            f"{n['alloc']} already allocated; {n['free']} free; {allowed}{tail}")


def _oom_2_1(n: dict, capacity_word: str, hint: str, others: str = "", pools: str = "") -> str:
    """The 2.1+ form (#99699): ``proc_info`` lists other processes, then this one; private pools from 2.5-ish."""
    allocated = n["alloc"] if not pools else "62.02 GiB"
    pool_text = f"with {pools} allocated in private pools (e.g., CUDA Graphs), " if pools else ""
    return (f"CUDA out of memory. Tried to allocate {n['req']}. GPU 0 has a total {capacity_word} of {n['total']} "
            f"of which {n['free']} is free. {others}Including non-PyTorch memory, this process has {n['process']} "
            f"memory in use. Of the allocated memory {allocated} is allocated by PyTorch, {pool_text}and "
            f"{n['stranded']} is reserved by PyTorch but unallocated.{hint}")


def _oom(versions: str, exc: str, capacity: str, fragmented: str) -> list[Message]:
    src = "c10/cuda/CUDACachingAllocator.cpp"
    return [Message("cuda_oom_capacity", "ZD402", versions, src, (f"{exc}: {capacity}",), FORWARD),
            Message("cuda_oom_fragmentation", "ZD401", versions, src, (f"{exc}: {fragmented}",), BACKWARD)]


def _reserved(n: dict) -> str:
    return f"{n['reserved']} reserved in total by PyTorch)"


OOM = [
    *_oom("torch 1.0-1.3", "RuntimeError", _oom_parenthesis(V100_CAPACITY, f"{V100_CAPACITY['stranded']} cached)"),
          _oom_parenthesis(V100_FRAGMENTED, f"{V100_FRAGMENTED['stranded']} cached)")),
    *_oom("torch 1.4-1.9", "RuntimeError", _oom_parenthesis(V100_CAPACITY, _reserved(V100_CAPACITY)),
          _oom_parenthesis(V100_FRAGMENTED, _reserved(V100_FRAGMENTED))),
    # set_per_process_memory_fraction() adds "X allowed; " (#48172, 1.8)
    *_oom("torch 1.8-1.9 memory fraction", "RuntimeError",
          _oom_parenthesis(V100_CAPACITY, _reserved(V100_CAPACITY), allowed="30.24 GiB allowed; "),
          _oom_parenthesis(V100_FRAGMENTED, _reserved(V100_FRAGMENTED), allowed="30.16 GiB allowed; ")),
    *_oom("torch 1.10-1.12", "RuntimeError", _oom_parenthesis(V100_CAPACITY, _reserved(V100_CAPACITY)) + OOM_HINT_1_10,
          _oom_parenthesis(V100_FRAGMENTED, _reserved(V100_FRAGMENTED)) + OOM_HINT_1_10),
    # OutOfMemoryError reaches Python as its own type from 1.13 (#83146)
    *_oom("torch 1.13-2.0", "torch.cuda.OutOfMemoryError",
          _oom_parenthesis(V100_CAPACITY, _reserved(V100_CAPACITY)) + OOM_HINT_1_10,
          _oom_parenthesis(V100_FRAGMENTED, _reserved(V100_FRAGMENTED)) + OOM_HINT_1_10),
    *_oom("torch 2.1", "torch.cuda.OutOfMemoryError",
          _oom_2_1(A100_CAPACITY, "capacty", OOM_HINT_2_1, others="Process 48102 has 512.00 MiB memory in use. "),
          _oom_2_1(A100_FRAGMENTED, "capacty", OOM_HINT_2_1)),
    *_oom("torch 2.4", "torch.OutOfMemoryError", _oom_2_1(A100_CAPACITY, "capacity", OOM_HINT_2_4),
          _oom_2_1(A100_FRAGMENTED, "capacity", OOM_HINT_2_4)),
    *_oom("torch latest", "torch.OutOfMemoryError",
          _oom_2_1(A100_CAPACITY, "capacity", OOM_HINT_LATEST, pools="512.00 MiB"),
          _oom_2_1(A100_FRAGMENTED, "capacity", OOM_HINT_LATEST)),
]


# --- CUDA runtime errors: c10/cuda/CUDAException.cpp, CUDAMiscFunctions.cpp, aten/src/THC/THCGeneral.cpp ----------

ASYNC_1_9 = ("CUDA kernel errors might be asynchronously reported at some other API call,so the stacktrace below "
             "might be incorrect. For debugging consider passing CUDA_LAUNCH_BLOCKING=1. ")
ASYNC_1_10 = ("\nCUDA kernel errors might be asynchronously reported at some other API call,so the stacktrace below "
              "might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1.")
ASYNC_2_0 = ("\nCUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below "
             "might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1.")
DSA = "\nCompile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n"
# latest: a help line naming the error, and the asynchronous hint only for the errors a kernel raises
ASYNC_ERRORS = {"cudaErrorIllegalAddress", "cudaErrorAssert", "cudaErrorLaunchFailure"}


def cuda_check(versions: str, text: str, name: str) -> str:
    """What C10_CUDA_CHECK raises for ``cudaGetErrorString() == text`` (``name``: cudaGetErrorName), type included."""
    if versions == "torch 1.0-1.8":
        return f"RuntimeError: CUDA error: {text}"
    if versions == "torch 1.9":
        return f"RuntimeError: {ASYNC_1_9}CUDA error: {text}"
    if versions == "torch 1.10-1.13":
        return f"RuntimeError: CUDA error: {text}{ASYNC_1_10}"
    if versions == "torch 2.0-2.1":
        return f"RuntimeError: CUDA error: {text}{ASYNC_2_0}{DSA}"
    if versions == "torch 2.4":
        return f"RuntimeError: CUDA error: {text}{ASYNC_2_0[:-1]}{DSA}"
    assert versions == "torch latest", versions
    suffix = (ASYNC_2_0[:-1] if name in ASYNC_ERRORS
              else "\nFor more detailed error information, run with CUDA_LOG_FILE=stderr")
    return (f"torch.AcceleratorError: CUDA error: {text}\nSearch for `{name}' in "
            f"https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html for more information."
            f"{suffix}{DSA}")


C10_VERSIONS = ("torch 1.0-1.8", "torch 1.9", "torch 1.10-1.13", "torch 2.0-2.1", "torch 2.4", "torch latest")
C10_CUDA = "c10/cuda/CUDAException.cpp, c10/cuda/CUDAMiscFunctions.cpp"
THC = "aten/src/THC/THCGeneral.cpp"
ILLEGAL = "an illegal memory access was encountered"
ASSERTED = "device-side assert triggered"
NO_KERNEL = "no kernel image is available for execution on the device"


def _thc(code: int, text: str, where: str) -> tuple[str, ...]:
    """__THCudaCheck, up to 1.10: the stderr line, then the exception."""
    return (f"THCudaCheck FAIL file={where.rsplit(':', 1)[0]} line={where.rsplit(':', 1)[1]} error={code} : {text}",
            f"RuntimeError: cuda runtime error ({code}) : {text} at {where}")


def kernel_asserts(path: str, line: int, func: str, expr: str) -> str:
    """The device's own assert print (CUDA's __assertfail), one line per failing thread; ``expr`` from the
    CUDA_KERNEL_ASSERT in PyTorch's kernel."""
    return "\n".join(f"{path}:{line}: {func}: block: [{b},0,0], thread: [{t},0,0] Assertion `{expr}` failed."
                     for b, t in ((211, 96), (211, 97), (211, 98)))


INDEX_ASSERT_ATEN = kernel_asserts("../aten/src/ATen/native/cuda/Indexing.cu", 1292, "indexSelectLargeIndex",
                                   "srcIndex < srcSelectDimSize")
INDEX_ASSERT_THC = kernel_asserts("/pytorch/aten/src/THC/THCTensorIndex.cu", 272, "indexSelectLargeIndex",
                                  "srcIndex < srcSelectDimSize")

CUDA = [
    Message("illegal_memory_access", "ZD903", "torch 1.0-1.10 THC", THC,
            _thc(700, ILLEGAL, "/pytorch/aten/src/THC/THCCachingHostAllocator.cpp:278"), BACKWARD),
    *(Message("illegal_memory_access", "ZD903", v, C10_CUDA, (cuda_check(v, ILLEGAL, "cudaErrorIllegalAddress"),),
              BACKWARD) for v in C10_VERSIONS),
    # the watchdog finds it first on a rank that is in a collective (ProcessGroupNCCL.cpp, 2.1)
    Message("illegal_memory_access", "ZD903", "torch 2.1 watchdog", "torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp",
            ("[E ProcessGroupNCCL.cpp:916] [Rank 3] NCCL watchdog thread terminated with exception: CUDA error: "
             f"{ILLEGAL}{ASYNC_2_0}{DSA}",
             "terminate called after throwing an instance of 'std::runtime_error'\n  what():  [Rank 3] NCCL watchdog "
             f"thread terminated with exception: CUDA error: {ILLEGAL}{ASYNC_2_0}{DSA}")),
    Message("device_side_assert", "ZD904", "torch 1.0-1.10 THC", THC + "; CUDA __assertfail",
            (INDEX_ASSERT_THC, *_thc(710, ASSERTED, "/pytorch/aten/src/THC/generic/THCTensorMath.cu:29")), FORWARD),
    *(Message("device_side_assert", "ZD904", v, C10_CUDA + "; aten/src/ATen/native/cuda/Indexing.cu",
              (INDEX_ASSERT_ATEN, cuda_check(v, ASSERTED, "cudaErrorAssert")), FORWARD)
      for v in C10_VERSIONS[2:]),
    Message("device_side_assert", "ZD904", "torch 1.10-latest", "aten/src/ATen/native/cuda/Loss.cu",
            (kernel_asserts("../aten/src/ATen/native/cuda/Loss.cu", 250, "nll_loss_forward_reduce_cuda_kernel_2d",
                            "t >= 0 && t < n_classes"),
             cuda_check("torch 2.0-2.1", ASSERTED, "cudaErrorAssert")), FORWARD, variant="nll_loss"),
    Message("cuda_error", "ZD908", "torch 1.0-1.10 THC", THC,
            ("RuntimeError: cublas runtime error : the GPU program failed to execute at "
             "/pytorch/aten/src/THC/THCBlas.cu:331",), FORWARD, variant="cublas"),
    # TORCH_CUDABLAS_CHECK (aten/src/ATen/cuda/Exceptions.h, 1.4+): "#EXPR" is the call as the preprocessor
    # joins its lines
    Message("cuda_error", "ZD908", "torch 1.4-latest", "aten/src/ATen/cuda/Exceptions.h, CUDABlas.cpp",
            ("RuntimeError: CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasSgemm( handle, opa, opb, m, "
             "n, k, &alpha, a, lda, b, ldb, &beta, c, ldc)`",), FORWARD, variant="cublas_sgemm"),
    Message("cuda_error", "ZD908", "torch 1.10-latest", "aten/src/ATen/cuda/Exceptions.h, CUDABlas.cpp",
            ("RuntimeError: CUDA error: CUBLAS_STATUS_NOT_SUPPORTED when calling `cublasGemmEx( handle, opa, opb, m, "
             "n, k, &falpha, a, CUDA_R_16BF, lda, b, CUDA_R_16BF, ldb, &fbeta, c, CUDA_R_16BF, ldc, CUDA_R_32F, "
             "CUBLAS_GEMM_DEFAULT_TENSOR_OP)`",), FORWARD, variant="cublas_gemmex_bf16"),
    Message("cuda_error", "ZD908", "torch 1.4-latest", "aten/src/ATen/cuda/CublasHandlePool.cpp",
            ("RuntimeError: CUDA error: CUBLAS_STATUS_NOT_INITIALIZED when calling `cublasCreate(handle)`",), FORWARD,
            variant="cublas_create"),
    # DeepSpeed's transformer kernels' GEMM wrappers (csrc/transformer/cublas_wrappers.cu) fprintf a failed
    # cublasStatus_t to stderr and carry on, so one failing layer prints a line per GEMM (DeepSpeed#454's forward):
    # bare "!!!! kernel execution error.\n" in 0.2.0-0.3.0, "(m: %d, n: %d, k: %d, error: %d) \n" from 0.3.1
    # (f0f2a7026), "(batch: %d, m: …" for cublas_strided_batched_gemm
    Message("cuda_error", "ZD908", "deepspeed 0.2.0-0.3.0", "csrc/transformer/cublas_wrappers.cu",
            ("!!!! kernel execution error.",), variant="ds_gemm_bare"),
    Message("cuda_error", "ZD908", "deepspeed 0.3.1-0.19", "csrc/transformer/cublas_wrappers.cu",
            ("!!!! kernel execution error. (m: 768, n: 4608, k: 3072, error: 13) ",
             "!!!! kernel execution error. (m: 2304, n: 4608, k: 768, error: 13) "), variant="ds_gemm"),
    Message("cuda_error", "ZD908", "deepspeed 0.3.1-0.19", "csrc/transformer/cublas_wrappers.cu",
            ("!!!! kernel execution error. (batch: 48, m: 384, n: 384, k: 64, error: 13) ",),
            variant="ds_strided_batched_gemm"),
    *(Message("cuda_error", "ZD908", v, C10_CUDA, (cuda_check(v, NO_KERNEL, "cudaErrorNoKernelImageForDevice"),),
              FORWARD, variant="no_kernel_image") for v in C10_VERSIONS),
]


# --- "Expected all tensors to be on the same device" and its forerunner ----------------------------------------------

DEVICE_MISMATCH = [
    # aten/src/ATen/Utils.h checked_dense_tensor_unwrap: the TH bindings, until an op was ported to ATen
    Message("device_mismatch", "ZD905", "torch 1.0-1.5 TH bindings", "aten/src/ATen/Utils.h",
            ("RuntimeError: Expected object of device type cuda but got device type cpu for argument #2 'mat1' in "
             "call to _th_addmm",), FORWARD),
    # addr/addbmm ported to ATen (#38421), until the TensorIterator check took over (1.8)
    Message("device_mismatch", "ZD905", "torch 1.6-1.7 addbmm", "aten/src/ATen/native/cuda/LinearAlgebra.cu",
            ("RuntimeError: Expected all tensors to be on the same device. Found: cuda:0, cpu, cuda:0 and cuda:0",),
            FORWARD),
    Message("device_mismatch", "ZD905", "torch 1.6-latest TensorIterator", "aten/src/ATen/TensorIterator.cpp",
            ("RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 "
             "and cpu!",), FORWARD),
    # the generated per-argument check (aten/src/ATen/core/adaption.cpp): wrapper names gained the dispatch key
    # in 2.0 (#90674)
    Message("device_mismatch", "ZD905", "torch 1.9-1.13", "aten/src/ATen/core/op_registration/adaption.cpp",
            ("RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cpu and "
             "cuda:0! (when checking argument for argument index in method wrapper__index_select)",), FORWARD),
    Message("device_mismatch", "ZD905", "torch 2.0-latest", "aten/src/ATen/core/adaption.cpp",
            ("RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 "
             "and cpu! (when checking argument for argument mat1 in method wrapper_CUDA_addmm)",), FORWARD),
]


# --- NCCL failing without a timeout: C10D_NCCL_CHECK (NCCLUtils.hpp) over ncclGetErrorString (nccl src/init.cc) --

SYSTEM_1_8 = "ncclSystemError: System call (socket, malloc, munmap, etc) failed."
SYSTEM_1_12 = ("ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error. "
               "It can be also caused by unexpected exit of a remote peer, you can check NCCL warnings for failure "
               "reason and see if there is connection closure by a peer.")
SYSTEM_1_13 = "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error. "
LAST_ERROR = "\nLast error:\nsocketStartConnect: Connect to 10.1.1.2<41553> failed : Connection refused"
PG_1X = "/pytorch/torch/lib/c10d/ProcessGroupNCCL.cpp"
PG_CSRC = "../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp"
NCCL_SRC = "torch/csrc/distributed/c10d/NCCLUtils.hpp (torch/lib/c10d before 1.10); nccl src/init.cc"


def _nccl(versions: str, text: str, variant: str = "") -> Message:
    return Message("nccl_error", "ZD909", versions, NCCL_SRC, (text,), ALL_REDUCE, variant)


NCCL_ERRORS = [
    _nccl("torch 1.0-1.2", f"RuntimeError: NCCL error in: {PG_1X}:272, unhandled system error"),
    _nccl("torch 1.3-1.7", f"RuntimeError: NCCL error in: {PG_1X}:492, unhandled system error, NCCL version 2.4.8"),
    _nccl("torch 1.8-1.9", f"RuntimeError: NCCL error in: {PG_1X}:825, unhandled system error, NCCL version 2.7.8\n"
                           f"{SYSTEM_1_8}"),
    _nccl("torch 1.10-1.11", f"RuntimeError: NCCL error in: {PG_CSRC}:957, unhandled system error, NCCL version "
                             f"2.10.3\n{SYSTEM_1_8}"),
    _nccl("torch 1.12", f"RuntimeError: NCCL error in: {PG_CSRC}:1191, unhandled system error, NCCL version 2.10.3\n"
                        f"{SYSTEM_1_12}"),
    _nccl("torch 2.0 NCCL 2.14", f"torch.distributed.DistBackendError: NCCL error in: {PG_CSRC}:1269, unhandled "
                                 f"system error, NCCL version 2.14.3\n{SYSTEM_1_13}{LAST_ERROR}"),
    # NCCL 2.18 (d97a32fa) appends the hint to ncclGetErrorString's words
    _nccl("torch 2.1+ NCCL 2.18+", "torch.distributed.DistBackendError: NCCL error in: "
                                   "../torch/csrc/distributed/c10d/NCCLUtils.hpp:219, unhandled system error (run with "
                                   f"NCCL_DEBUG=INFO for details), NCCL version 2.18.1\n{SYSTEM_1_13}{LAST_ERROR}"),
    _nccl("torch 2.1+ NCCL 2.18+", "torch.distributed.DistBackendError: NCCL error in: "
                                   "../torch/csrc/distributed/c10d/NCCLUtils.hpp:219, invalid usage (run with "
                                   "NCCL_DEBUG=WARN for details), NCCL version 2.19.3\nncclInvalidUsage: This usually "
                                   "reflects invalid usage of NCCL library.\nLast error:\nDuplicate GPU detected : "
                                   "rank 3 and rank 0 both on CUDA device 1b000", "invalid_usage"),
    _nccl("torch 2.1+ NCCL 2.18+", f"torch.distributed.DistBackendError: NCCL error in: {PG_CSRC}:1970, unhandled "
                                   "cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.18.1\n"
                                   "ncclUnhandledCudaError: Call to CUDA function failed.\nLast error:\n"
                                   "Cuda failure 'out of memory'", "unhandled_cuda_error"),
]


# --- collective timeouts: ProcessGroupNCCL.cpp (torch/lib/c10d up to 1.9, torch/csrc/distributed/c10d after) -------

PGNCCL = "torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp (torch/lib/c10d before 1.10)"
SOME_FAILED = ("Some NCCL operations have failed or timed out. Due to the asynchronous nature of CUDA kernels, "
               "subsequent GPU operations might run on corrupted/incomplete data.")
TEAR_DOWN = "To avoid data inconsistency, we are taking the entire process down."
SOME_FAILED_1_8 = SOME_FAILED + " To avoid this inconsistency, we are taking the entire process down."   # to 1.12


def _watchdog(versions: str, pg: str, work: str, log: str, after: tuple[tuple[int, str], ...],
              terminate: str) -> Message:
    """The watchdog's timeout line, what the watchdog logs after it, and the abort that ends the process.

    ``pg``: the process group's prefix (``[Rank 3] ``, ``[PG 0 Rank 3] ``...); ``log``: the C++ log line's
    prefix, ``%d`` taking the source line; ``after``: (source line, text) of the records that follow;
    ``{timeout}`` in those and in ``terminate`` is the timeout message.
    """
    timeout = (f"{pg}Watchdog caught collective operation timeout: {work} ran for 1800512 milliseconds before "
               "timing out.")
    records = (log % 566 + "{timeout}", *(log % line + text for line, text in after), terminate)
    return Message("collective_timeout", "ZD701", versions, PGNCCL,
                   tuple(r.replace("{timeout}", timeout).replace("{pg}", pg) for r in records))


C10_LOG = "[E ProcessGroupNCCL.cpp:%d] "   # c10's MessageLogger without glog, up to 2.1
C10_LOG_2_4 = "[rank3]:[E501 10:30:02.415673218 ProcessGroupNCCL.cpp:%d] "   # 2.4: rank, date and time (Logging.cpp)
WORK_SEQ = "WorkNCCL(SeqNum=2134, OpType=ALLREDUCE, Timeout(ms)=1800000)"
WORK_NUMEL = "WorkNCCL(SeqNum=2134, OpType=ALLREDUCE, NumelIn=262144000, NumelOut=262144000, Timeout(ms)=1800000)"
TERMINATE = "terminate called after throwing an instance of 'std::runtime_error'\n  what():  {timeout}"
TERMINATE_2_1 = ("terminate called after throwing an instance of 'std::runtime_error'\n  what():  {pg}NCCL watchdog "
                 "thread terminated with exception: {timeout}")
TERMINATE_2_4 = ("terminate called after throwing an instance of 'c10::DistBackendError'\n  what():  {pg}Process "
                 "group watchdog thread terminated with exception: {timeout}")
AFTER_2_4 = ((1664, "{pg}Exception (either an error or timeout) detected by watchdog at work: 2134, last enqueued "
                    "NCCL work: 2134, last completed NCCL work: 2133."),
             (1690, "{pg}Timeout at NCCL work: 2134, last enqueued NCCL work: 2134, last completed NCCL work: 2133."),
             (621, "{pg}" + SOME_FAILED), (627, "{pg}" + TEAR_DOWN),
             (1515, "{pg}Process group watchdog thread terminated with exception: {timeout}"))

TIMEOUTS = [
    _watchdog("torch 1.8-1.10", "[Rank 3] ", "WorkNCCL(OpType=ALLREDUCE, TensorShape=[262144000], "
              "Timeout(ms)=1800000)", C10_LOG, ((325, SOME_FAILED_1_8),), TERMINATE),
    _watchdog("torch 1.11-1.12", "[Rank 3] ", WORK_SEQ, C10_LOG, ((325, SOME_FAILED_1_8),), TERMINATE),
    _watchdog("torch 1.13-2.0", "[Rank 3] ", WORK_SEQ, C10_LOG, ((455, SOME_FAILED), (460, TEAR_DOWN)), TERMINATE),
    _watchdog("torch 2.1", "[Rank 3] ", WORK_NUMEL, C10_LOG,
              ((486, SOME_FAILED), (494, TEAR_DOWN), (916, "{pg}NCCL watchdog thread terminated with exception: "
                                                          "{timeout}")), TERMINATE_2_1),
    _watchdog("torch 2.4", "[PG 0 Rank 3] ", WORK_NUMEL, C10_LOG_2_4, AFTER_2_4, TERMINATE_2_4),
    _watchdog("torch latest", "[PG ID 0 PG GUID 0(default_pg) Rank 3] ", WORK_NUMEL, C10_LOG_2_4, AFTER_2_4,
              TERMINATE_2_4),
    # NCCL_BLOCKING_WAIT=1: the timeout reaches the main thread as an exception (up to 1.7 only that: the
    # communicator abort before it is logged at INFO, below c10's default level)
    Message("collective_timeout", "ZD701", "torch 1.5-1.7 blocking wait", PGNCCL,
            ("RuntimeError: Operation timed out!",), ALL_REDUCE, "blocking_wait"),
    Message("collective_timeout", "ZD701", "torch 1.8-2.0 blocking wait", PGNCCL,
            (f"RuntimeError: [Rank 3] Caught collective operation timeout: {WORK_SEQ} ran for 1800512 milliseconds "
             "before timing out.",), ALL_REDUCE, "blocking_wait"),
    Message("collective_timeout", "ZD701", "torch 2.1 blocking wait", PGNCCL,
            (C10_LOG % 540 + f"[Rank 3] Work {WORK_NUMEL} timed out in blocking wait (NCCL_BLOCKING_WAIT=1).",
             f"torch.distributed.DistBackendError: [Rank 3] Watchdog caught collective operation timeout: {WORK_NUMEL} "
             "ran for 1800512 milliseconds before timing out."), ALL_REDUCE, "blocking_wait"),
    Message("collective_timeout", "ZD701", "torch 2.4 blocking wait", PGNCCL,
            (C10_LOG_2_4 % 669 + f"[PG 0 Rank 3] Work {WORK_NUMEL} timed out in blocking wait "
                                 "(TORCH_NCCL_BLOCKING_WAIT=1).",
             f"torch.distributed.DistBackendError: [PG 0 Rank 3] Watchdog caught collective operation timeout: "
             f"{WORK_NUMEL} ran for 1800512 milliseconds before timing out."), ALL_REDUCE, "blocking_wait"),
    Message("collective_timeout", "ZD701", "torch latest blocking wait", PGNCCL,
            (C10_LOG_2_4 % 888 + f"[PG ID 0 PG GUID 0(default_pg) Rank 3] Work {WORK_NUMEL} timed out in blocking "
                                 "wait.",
             "torch.distributed.DistBackendError: [PG ID 0 PG GUID 0(default_pg) Rank 3] Watchdog caught collective "
             f"operation timeout: {WORK_NUMEL} ran for 1800512 milliseconds before timing out."), ALL_REDUCE,
            "blocking_wait"),
    # the heartbeat monitor (2.2+): the watchdog itself hangs, in a NCCL/CUDA call; the hang the timeout never reports
    Message("collective_timeout", "ZD701", "torch 2.4-latest", PGNCCL,
            (C10_LOG_2_4 % 1383 + "[PG 0 Rank 3] Heartbeat monitor timed out! Process will be terminated after "
                                  "dumping debug info. workMetaList_.size()=1",
             C10_LOG_2_4.replace("[E", "[F") % 1224 + "[PG 0 Rank 3] ProcessGroupNCCL's watchdog got stuck for 480 "
             "seconds without making progress in monitoring enqueued collectives. This typically indicates a NCCL/CUDA "
             "API hang blocking the watchdog, and could be triggered by another thread holding the GIL inside a CUDA "
             "api, or other deadlock-prone behaviors.If you suspect the watchdog is not actually stuck and a longer "
             "timeout would help, you can either increase the timeout (TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC) to a larger "
             "value or disable the heartbeat monitor (TORCH_NCCL_ENABLE_MONITORING=0).If either of aforementioned "
             "helps, feel free to file an issue to PyTorch about the short timeout or false positive abort; otherwise, "
             "please attempt to debug the hang. workMetaList_.size() = 1"), variant="watchdog_stuck"),
]


# --- torch.distributed.elastic's failure summary: torch/distributed/elastic/multiprocessing/errors/__init__.py -----

TORCHRUN = traceback(
    ("/usr/local/bin/torchrun", 8, "<module>", "sys.exit(main())"),
    (f"{SITE}/torch/distributed/elastic/multiprocessing/errors/__init__.py", 346, "wrapper",
     "return f(*args, **kwargs)"),
    (f"{SITE}/torch/distributed/run.py", 806, "main", "run(args)"),
    (f"{SITE}/torch/distributed/run.py", 797, "run", "elastic_launch("),
    (f"{SITE}/torch/distributed/launcher/api.py", 134, "__call__",
     "return launch_agent(self._config, self._entrypoint, list(args))"),
    (f"{SITE}/torch/distributed/launcher/api.py", 264, "launch_agent", "raise ChildFailedError("))
ELASTIC = "torch/distributed/elastic/multiprocessing/errors/__init__.py"
SIGNALS = {-11: "SIGSEGV", -6: "SIGABRT", -7: "SIGBUS", -9: "SIGKILL"}


def child_failed(versions: str, exitcode: int) -> str:
    """ChildFailedError's text as each template printed it (ProcessFailure + format_msg), type included."""
    name, pid = SIGNALS[exitcode], 48213
    message = f"Signal {-exitcode} ({name}) received by PID {pid}"
    if versions in ("torch 1.9", "torch 1.10"):
        quoted = f'"{message}"' if versions == "torch 1.9" else message
        failure = (f"[0]:\n  time: 2024-05-01_10:00:00\n  rank: 3 (local_rank: 3)\n  exitcode: {exitcode} (pid: "
                   f"{pid})\n  error_file: <N/A>\n  msg: {quoted}")
        title = "  train.py FAILED  "
        width = max(len(title), *(len(line) for line in failure.split("\n")))
        body = (f"\n{'*' * width}\n{title.center(width)}\n{'=' * width}\nRoot Cause:\n{failure}\n{'=' * width}\n"
                f"Other Failures:\n  <NO_OTHER_FAILURES>\n{'*' * width}\n")
    else:
        signal = f"  ({name})" if versions == "torch 2.13" else ""
        failure = (f"[0]:\n  time      : 2024-05-01_10:00:00\n  host      : node01.cluster\n  rank      : 3 "
                   f"(local_rank: 3)\n  exitcode  : {exitcode} (pid: {pid}){signal}\n  error_file: <N/A>\n"
                   f"  traceback : {message}")
        width = min(max(len("train.py FAILED"), *(len(line) for line in failure.split("\n"))), 60)
        body = (f"\n{'=' * width}\ntrain.py FAILED\n{'-' * width}\nFailures:\n  <NO_OTHER_FAILURES>\n{'-' * width}\n"
                f"Root Cause (first observed failure):\n{failure}\n{'=' * width}")
    return f"torch.distributed.elastic.multiprocessing.errors.ChildFailedError: {body}"


def _elastic(family: str, rule: str, versions: str, exitcode: int) -> Message:
    # api.py logs the first failure before the summary is raised (1.9+)
    line = (f"ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: {exitcode}) local_rank: 3 "
            "(pid: 48213) of binary: /usr/bin/python3")
    return Message(family, rule, versions, ELASTIC + ", multiprocessing/api.py", (line, child_failed(versions,
                   exitcode)), TORCHRUN, SIGNALS[exitcode] if exitcode != -11 else "")


ELASTIC_FAILURES = [
    *(_elastic("fatal_signal", "ZD902", v, -11) for v in ("torch 1.9", "torch 1.10", "torch 1.11-2.4", "torch 2.13")),
    _elastic("fatal_signal", "ZD902", "torch 1.11-2.4", -6),
    _elastic("fatal_signal", "ZD902", "torch 1.11-2.4", -7),
    _elastic("host_oom_kill", "ZD405", "torch 1.11-2.4", -9),
    _elastic("host_oom_kill", "ZD405", "torch 2.13", -9),
]


# --- host allocation failures: c10/core/CPUAllocator.cpp, c10/core/impl/alloc_cpu.cpp (1.11+) ----------------------

CPU_ALLOC = [
    # posix_memalign failing under CAFFE_ENFORCE_EQ: the enforce's own words, 12 being ENOMEM
    Message("host_alloc_failed", "ZD406", "torch 1.0-1.1", "c10/core/CPUAllocator.cpp",
            ("RuntimeError: [enforce fail at CPUAllocator.cpp:55] posix_memalign(&data, gAlignment, nbytes) == 0. "
             "12 vs 0",), FORWARD),
    # CAFFE_THROW: an empty condition before the ". "
    Message("host_alloc_failed", "ZD406", "torch 1.2-1.10", "c10/core/CPUAllocator.cpp",
            ("RuntimeError: [enforce fail at CPUAllocator.cpp:65] . DefaultCPUAllocator: can't allocate memory: you "
             "tried to allocate 137438953472 bytes. Error code 12 (Cannot allocate memory)",), FORWARD),
    Message("host_alloc_failed", "ZD406", "torch 1.11-1.12", "c10/core/impl/alloc_cpu.cpp",
            ("RuntimeError: [enforce fail at alloc_cpu.cpp:73] . DefaultCPUAllocator: can't allocate memory: you "
             "tried to allocate 137438953472 bytes. Error code 12 (Cannot allocate memory)",), FORWARD),
    Message("host_alloc_failed", "ZD406", "torch 1.13-latest", "c10/core/impl/alloc_cpu.cpp",
            ("RuntimeError: [enforce fail at alloc_cpu.cpp:83] err == 0. DefaultCPUAllocator: can't allocate memory: "
             "you tried to allocate 137438953472 bytes. Error code 12 (Cannot allocate memory)",), FORWARD),
]


# --- DeepSpeed: runtime/config.py, runtime/fp16/loss_scaler.py and the ZeRO optimizers, launcher/launch.py --------

CONFIG_FRAMES = traceback(
    SCRIPT, ("/workspace/train.py", 96, "main", "engine, optimizer, _, _ = deepspeed.initialize("),
    (f"{SITE}/deepspeed/runtime/config.py", 942, "_do_sanity_check", "self._batch_assertion()"),
    (f"{SITE}/deepspeed/runtime/config.py", 891, "_batch_assertion",
     "assert train_batch == micro_batch * grad_acc * self.world_size, ("))
MISMATCH = "32 != 4 * 2 * 8"   # train_batch_size, micro batch, gradient accumulation, world size


def _batch(versions: str, text: str) -> Message:
    return Message("deepspeed_batch_assertion", "ZD101", versions, "deepspeed/runtime/config.py "
                   "(deepspeed/pt/deepspeed_config.py before 0.3)", (f"AssertionError: {text}",), CONFIG_FRAMES)


BATCH = [
    _batch("deepspeed 0.1", "Check batch related parameters. Train_batch_size is not equalto micro_batch_per_gpu * "
                            f"gradient_acc_step * world_size{MISMATCH}"),
    _batch("deepspeed 0.2-0.5", "Check batch related parameters. train_batch_size is not equal to micro_batch_per_gpu "
                                f"* gradient_acc_step * world_size{MISMATCH}"),
    _batch("deepspeed 0.6-0.19", "Check batch related parameters. train_batch_size is not equal to "
                                 f"micro_batch_per_gpu * gradient_acc_step * world_size {MISMATCH}"),
    *(Message("deepspeed_batch_nonpositive", "ZD105", "deepspeed 0.1-0.19", "deepspeed/runtime/config.py",
              (f"AssertionError: {text} has to be greater than 0",), CONFIG_FRAMES, variant)
      for variant, text in (("micro", "Micro batch size per gpu: 0"), ("grad_acc", "Gradient accumulation steps: 0"))),
]


def _scales(floats: bool) -> list[tuple[str, str]]:
    """(attempted, reduced) of a dynamic scale collapsing from 16 to min_loss_scale 1; floats up to 0.8.2."""
    pairs = [(16, 8), (8, 4), (4, 2), (2, 1)]
    return [(f"{a}.0", f"{b}.0") if floats else (str(a), str(b)) for a, b in pairs]


AT_MIN = ("Exception: Current loss scale already at minimum - cannot decrease scale anymore. Exiting run.")
SCALER_FRAMES = traceback(
    SCRIPT, ("/workspace/train.py", 193, "main", "engine.step()"),
    (f"{SITE}/deepspeed/runtime/zero/stage_1_and_2.py", 1829, "step", "self._update_scale(self.overflow)"),
    (f"{SITE}/deepspeed/runtime/fp16/loss_scaler.py", 183, "update_scale",
     'raise Exception("Current loss scale already at minimum - cannot decrease scale anymore. Exiting run.")'))


def _collapse(versions: str, source: str, line: str, floats: bool, at_min: bool, variant: str = "",
              hysteresis: str = "") -> Message:
    """``line`` formats one overflow (``{a}``, ``{b}``); before 0.6.5 the scaler stays at the minimum and goes on
    skipping steps, from 0.6.5 it raises."""
    records = [hysteresis] if hysteresis else []
    records += [line.format(a=a, b=b) for a, b in _scales(floats)]
    if at_min:
        return Message("deepspeed_fp16_collapse", "ZD201", versions, source, (*records, AT_MIN), SCALER_FRAMES,
                       variant)
    # max(cur_scale / 2, min_scale): a float 1.0, then the int min_scale, the steps skipped on and on
    records += [line.format(a="1.0", b="1"), line.format(a="1", b="1"), line.format(a="1", b="1")]
    return Message("deepspeed_fp16_collapse", "ZD201", versions, source, tuple(records), variant=variant)


ZERO_DEEPSCALE = "[deepscale] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: {a}, reducing to {b}"
ZERO_FP16 = ("[deepspeed] fp16 dynamic loss scale overflow! Rank 0 Skipping step. Attempted loss scale: {a}, reducing "
             "to {b}")
ZERO_DEEPSPEED = "[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: {a}, reducing to {b}"
FP16_OPT = "[deepspeed] OVERFLOW! Skipping step. Attempted loss scale: {a}, reducing to {b}"
FP16_OPT_3_12 = ("[deepspeed] fp16 dynamic loss scale overflow! Skipping step. Attempted loss scale: {a}, reducing to "
                 "{b}")
STAGE2 = "deepspeed/runtime/zero/stage2.py"

FP16 = [
    _collapse("deepspeed 0.2-0.3.11 ZeRO-2", STAGE2, ZERO_DEEPSCALE, True, False),
    _collapse("deepspeed 0.3.12-0.5.3 ZeRO-2", STAGE2, ZERO_FP16, True, False),
    _collapse("deepspeed 0.3.12-0.6.0 ZeRO-3", "deepspeed/runtime/zero/stage3.py", ZERO_DEEPSCALE, True, False),
    _collapse("deepspeed 0.5.8-0.6.0 ZeRO-2", STAGE2, ZERO_DEEPSCALE, True, False),
    _collapse("deepspeed 0.6.1-0.6.4", "deepspeed/runtime/zero/stage_1_and_2.py", ZERO_DEEPSPEED, True, False),
    _collapse("deepspeed 0.6.5-0.8.2", "deepspeed/runtime/zero/stage_1_and_2.py, runtime/fp16/loss_scaler.py",
              ZERO_DEEPSPEED, True, True),
    # 0.8.3 (#3008): ints, and the hysteresis line; logged at INFO, which 0.17.6+ hides unless log_level is info
    _collapse("deepspeed 0.8.3-0.19", "deepspeed/runtime/fp16/loss_scaler.py", ZERO_DEEPSPEED, False, True,
              hysteresis="[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 16, but hysteresis is 2. "
                         "Reducing hysteresis to 1"),
    # the fp16 optimizer without ZeRO never raises at the minimum
    _collapse("deepspeed 0.1-0.3.11 FP16_Optimizer", "deepspeed/runtime/fp16/fused_optimizer.py", FP16_OPT, True,
              False, "no_zero"),
    _collapse("deepspeed 0.3.12-0.19 FP16_Optimizer", "deepspeed/runtime/fp16/fused_optimizer.py", FP16_OPT_3_12,
              True, False, "no_zero"),
]

RANK_CMD = "['/usr/bin/python3', '-u', 'train.py', '--local_rank=3', '--deepspeed', 'ds_config.json']"
LAUNCHER = [
    # 0.3.0-0.3.11 only wait()ed on the ranks and printed nothing: no message to build
    Message("host_oom_kill", "ZD405", "deepspeed 0.3.12-0.5.7", "deepspeed/launcher/launch.py",
            ("Killing subprocess 48213", f"subprocess.CalledProcessError: Command '{RANK_CMD}' died with "
                                         "<Signals.SIGKILL: 9>."),
            traceback(("/usr/lib/python3.10/runpy.py", 196, "_run_module_as_main",
                       'return _run_code(code, main_globals, None,'),
                      (f"{SITE}/deepspeed/launcher/launch.py", 171, "main",
                       "sigkill_handler(signal.SIGTERM, None)  # not coming back"),
                      (f"{SITE}/deepspeed/launcher/launch.py", 161, "sigkill_handler",
                       "raise subprocess.CalledProcessError(returncode=last_return_code, cmd=cmd)"))),
    Message("host_oom_kill", "ZD405", "deepspeed 0.5.8-0.19", "deepspeed/launcher/launch.py",
            ("Killing subprocess 48213", f"{RANK_CMD} exits with return code = -9")),
    # the same line pasted alone (held-out 5: databrickslabs/dolly#166), without the "Killing subprocess" before it
    Message("host_oom_kill", "ZD405", "deepspeed 0.5.8-0.19", "deepspeed/launcher/launch.py",
            (f"{RANK_CMD} exits with return code = -9",), variant="alone"),
]


# --- read after the third held-out set (2026-12-02): a DataLoader worker SIGKILLed, a new process group's store
# barrier, DeepSpeed's config models refusing a key -------------------------------------------------------------

INIT = traceback(SCRIPT, ("/workspace/train.py", 160, "main",
                          "engine, *_ = deepspeed.initialize(model=model, config=args.deepspeed_config)"))
LATER = [
    # torch/csrc/DataLoader.cpp: "DataLoader worker (pid {}) is killed by signal: {}. ", strsignal(SIGKILL)
    Message("host_oom_kill", "ZD405", "torch 1.0-2.13", "torch/csrc/DataLoader.cpp",
            ("RuntimeError: DataLoader worker (pid 19597) is killed by signal: Killed. ",),
            traceback(SCRIPT, ("/workspace/train.py", 180, "main", "for batch in loader:"))),
    # torch/distributed/distributed_c10d.py _store_based_barrier
    Message("collective_timeout", "ZD701", "torch 1.8-1.13", "torch/distributed/distributed_c10d.py",
            ("RuntimeError: Timed out initializing process group in store based barrier on rank: 7, for key: "
             "store_based_barrier_key:1 (world_size=8, worker_count=4, timeout=0:30:00)",), INIT),
    Message("collective_timeout", "ZD701", "torch 2.0-2.13", "torch/distributed/distributed_c10d.py",
            ("torch.distributed.DistStoreError: Timed out initializing process group in store based barrier on rank 7, "
             "for key: store_based_barrier_key:1 (world_size=8, num_workers_joined=4, timeout=0:30:00 error=Wait "
             "timeout)",), INIT),
    # deepspeed/runtime/config_utils.py DeepSpeedConfigModel (extra="forbid"): pydantic 1 until 0.14, 2 since 0.15
    Message("deepspeed_config_rejected", "ZD625", "deepspeed 0.7-0.14", "deepspeed/runtime/config_utils.py",
            ("pydantic.error_wrappers.ValidationError: 1 validation error for DeepSpeedZeroConfig\n"
             "stage3_prefetch_bucket_sze\n  extra fields not permitted (type=value_error.extra)",), INIT),
    Message("deepspeed_config_rejected", "ZD625", "deepspeed 0.15-0.19", "deepspeed/runtime/config_utils.py",
            ("pydantic_core._pydantic_core.ValidationError: 2 validation errors for DeepSpeedBF16Config\n"
             "loss_scale\n  Extra inputs are not permitted [type=extra_forbidden, input_value=0, input_type=int]\n"
             "    For further information visit https://errors.pydantic.dev/2.11/v/extra_forbidden\n"
             "hysteresis\n  Extra inputs are not permitted [type=extra_forbidden, input_value=2, input_type=int]\n"
             "    For further information visit https://errors.pydantic.dev/2.11/v/extra_forbidden",), INIT),
]

# --- read after the fifth held-out set (2026-12-04): accelerate's DeepSpeedPlugin refusing a config ------------

HF_ARGS = traceback(SCRIPT, ("/workspace/train.py", 156, "main",
                             "args = parser.parse_args_into_dataclasses()"),
                    (f"{SITE}/accelerate/utils/dataclasses.py", 1176, "__post_init__",
                     'raise ValueError("Please specify the ZeRO optimization config in the DeepSpeed config.")'))
ACCELERATE = [
    # accelerate/utils/dataclasses.py DeepSpeedPlugin.__post_init__ (read in the installed accelerate only)
    Message("zero_section_missing", "ZD626", "accelerate (installed)", "accelerate/utils/dataclasses.py",
            ("ValueError: Please specify the ZeRO optimization config in the DeepSpeed config.",), HF_ARGS),
]

GRPO_INIT = traceback(SCRIPT, ("/workspace/train.py", 150, "main", "trainer = GRPOTrainer("),
                      (f"{SITE}/trl/trainer/grpo_trainer.py", 320, "__init__", "raise ValueError("))
GRPO_ARGS = traceback(SCRIPT, ("/workspace/train.py", 141, "main", "script_args, training_args, model_args = "
                               "parser.parse_args_and_config()"),
                      ("<string>", 169, "__init__", ""),
                      (f"{SITE}/trl/trainer/grpo_config.py", 595, "__post_init__", "raise ValueError("))


def _grpo(versions: str, variant: str, text: str, frames: tuple[str, ...] = GRPO_ARGS) -> Message:
    where = "trl/trainer/grpo_trainer.py" if frames is GRPO_INIT else "trl/trainer/grpo_config.py"
    return Message("trl_generations_indivisible", "ZD109", versions, where, (f"ValueError: {text}",), frames, variant)


TRL = [
    # the generation batch must hold whole groups of num_generations completions: each wording TRL has raised it in
    _grpo("trl 0.15-0.16", "train", "The global train batch size (7 x 1) must be evenly divisible by the number of "
          "generations per prompt (8). Given the current train batch size, the valid values for the number of "
          "generations are: [7].", GRPO_INIT),
    _grpo("trl 0.15-0.16", "eval", "The global eval batch size (7 x 2) must be evenly divisible by the number of "
          "generations per prompt (8). Given the current eval batch size, the valid values for the number of "
          "generations are: [2, 7, 14].", GRPO_INIT),
    _grpo("trl 0.17", "train", "The effective train batch size (3 x 2 x 4) must be evenly divisible by the number "
          "of generations per prompt (7). Given the current effective train batch size, the valid values for the "
          "number of generations are: [2, 3, 4, 6, 8, 12, 24].", GRPO_INIT),
    _grpo("trl 0.18-0.19", "eval", "The global eval batch size (3 x 2) must be evenly divisible by the number of "
          "generations per prompt (4). Given the current global eval batch size, the valid values for the number of "
          "generations are: [2, 3, 6]."),
    _grpo("trl 0.18-latest", "global_batch", "generation_batch_size (10) must be divisible by the global batch size "
          "(4)."),
    _grpo("trl 0.20-latest", "num_generations", "generation_batch_size (48) must be divisible by num_generations (7)."),
    _grpo("trl 0.27-latest", "eval", "The global eval batch size (2 * 7) must be divisible by the number of "
          "generations used for evaluation (4)."),
]

# --- read after the seventh held-out set (2026-12-04): the kernel's one-line OOM summary --------------------------

KERNEL_OOM = [
    # linux mm/oom_kill.c dump_oom_summary: "oom-kill:constraint=%s,nodemask=%*pbl", then
    # cpuset_print_current_mems_allowed (",cpuset=%s,mems_allowed=%*pbl"), mem_cgroup_print_oom_context
    # (",oom_memcg=<path>" or ",global_oom", then ",task_memcg=<path>"), ",task=%s,pid=%d,uid=%d"; as dmesg prints it
    Message("host_oom_kill", "ZD405", "linux 4.19+", "mm/oom_kill.c",
            ("[17798674.377396] oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=38e6fab2d82b,"
             "mems_allowed=0-7,oom_memcg=/docker/38e6fab2d82b,task_memcg=/docker/38e6fab2d82b,task=python,"
             "pid=202779,uid=1000",), variant="memcg"),
    Message("host_oom_kill", "ZD405", "linux 4.19+", "mm/oom_kill.c",
            ("[26002.108918] oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=user.slice,mems_allowed=0,"
             "global_oom,task_memcg=/user.slice/user-1000.slice/session-3.scope,task=python,pid=576419,uid=1000",),
            variant="global"),
]

# NCCL's own WARN line for a CUDA call that failed: src/include/checks.h CUDACHECK "Cuda failure '%s'" (runtime API,
# 2.3.5+), src/include/cudawrap.h CUCHECK "Cuda failure %d '%s'" (driver API, 2.19.1+); debug.cc's prefix
# "\n%s:%d:%d [%d] %s:%d NCCL WARN " (host:pid:tid [device] file:line), "(%s)" the function before "NCCL WARN" in
# 2.30.7+
NCCL_WARN = "node01:48213:48290 [3] "
NCCL_CUDA = [
    Message("illegal_memory_access", "ZD903", "nccl 2.3.5-latest", "nccl src/include/checks.h, src/debug.cc",
            (f"\n{NCCL_WARN}enqueue.cc:1541 NCCL WARN Cuda failure 'an illegal memory access was encountered'",),
            variant="CUDACHECK"),
    Message("illegal_memory_access", "ZD903", "nccl 2.19.1-2.30.4", "nccl src/include/cudawrap.h, src/debug.cc",
            (f"\n{NCCL_WARN}include/alloc.h:125 NCCL WARN Cuda failure 700 "
             "'an illegal memory access was encountered'",),
            variant="CUCHECK"),
    Message("illegal_memory_access", "ZD903", "nccl 2.30.7-latest", "nccl src/include/cudawrap.h, src/debug.cc",
            (f"{NCCL_WARN}include/alloc.h:115 (ncclCuMemHostFree) NCCL WARN Cuda failure 700 'an illegal memory "
             "access was encountered'",), variant="CUCHECK"),
]

# bash, jobs.c notify_of_job_status: a non-interactive shell reports a foreground job killed by a signal as
# "%s: line %d: " (get_name_for_error: the shell's or the script's name) and pretty_print_job(JLIST_NONINTERACTIVE):
# the pid "%5ld", the signal's description padded to 2 + LONGEST_SIGNAL_DESC (24), the command
BASH_JOB = [
    Message("host_oom_kill", "ZD405", "bash (jobs.c)", "bash jobs.c",
            (f"/bin/bash: line 27: 48213 {'Killed'.ljust(26)}python train.py --deepspeed ds_config.json",),
            variant="shell"),
    Message("host_oom_kill", "ZD405", "bash (jobs.c)", "bash jobs.c",
            (f"train.sh: line 3:  4821 {'Killed'.ljust(26)}deepspeed --num_gpus 8 train.py --deepspeed ds.json",),
            variant="script"),
]

# The watchdog finding an NCCL error, not a timeout (ProcessGroupNCCL checkForNCCLErrorsInternal: "NCCL error: " +
# ncclGetErrorWithVersion + "\n" + getNcclErrorDetailStr, std::runtime_error, DistBackendError from 2.0):
# WorkNCCL::handleException logs the same epitaph and teardown a timeout gets, then the process aborts on the error
ASYNC_ERROR = "NCCL error: unhandled system error, NCCL version 2.14.3\n" + SYSTEM_1_13 + LAST_ERROR
ASYNC_ERROR_2_18 = ("NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.18.1\n"
                    + SYSTEM_1_13 + LAST_ERROR)
NCCL_ASYNC = [
    Message("nccl_error", "ZD909", "torch 1.13-2.0", PGNCCL,
            (C10_LOG % 455 + SOME_FAILED, C10_LOG % 460 + TEAR_DOWN,
             f"terminate called after throwing an instance of 'std::runtime_error'\n  what():  {ASYNC_ERROR}"),
            variant="watchdog_error"),
    Message("nccl_error", "ZD909", "torch 2.4", PGNCCL,
            (C10_LOG_2_4 % 1664 + "[PG 0 Rank 3] Exception (either an error or timeout) detected by watchdog at work: "
             "2134, last enqueued NCCL work: 2134, last completed NCCL work: 2133.",
             C10_LOG_2_4 % 621 + "[PG 0 Rank 3] " + SOME_FAILED, C10_LOG_2_4 % 627 + "[PG 0 Rank 3] " + TEAR_DOWN,
             C10_LOG_2_4 % 1515 + "[PG 0 Rank 3] Process group watchdog thread terminated with exception: "
             + ASYNC_ERROR_2_18,
             "terminate called after throwing an instance of 'c10::DistBackendError'\n  what():  [PG 0 Rank 3] "
             f"Process group watchdog thread terminated with exception: {ASYNC_ERROR_2_18}"),
            variant="watchdog_error"),
    # a peer or the fabric gone: ncclGetErrorString's ncclRemoteError "remote process exited or there was a network
    # error" (NCCL 2.12+), getNcclErrorDetailStr's "ncclRemoteError: A call failed possibly due to a network error or
    # a remote process exiting prematurely." (NCCL_REMOTE_ERROR), Last error: net_ib.cc's completion WARN
    Message("nccl_error", "ZD909", "torch 1.13-2.0", PGNCCL,
            (C10_LOG % 455 + SOME_FAILED, C10_LOG % 460 + TEAR_DOWN,
             "terminate called after throwing an instance of 'std::runtime_error'\n  what():  NCCL error: remote "
             "process exited or there was a network error, NCCL version 2.14.3\nncclRemoteError: A call failed "
             "possibly due to a network error or a remote process exiting prematurely.\nLast error:\nNET/IB : Got "
             "completion from peer 10.1.1.2<39138> with error 12, opcode 0, len 0, vendor err 129"),
            variant="watchdog_remote_error"),
]

# torch/csrc/DataLoader.cpp: a worker's SIGBUS handler (SIGNAL_HANDLER(SIGBUS, ...), "\n"-terminated) and the main
# process's THPModule_errorIfAnyWorkerFails, reached from the DataLoader's queue wait through signal_handling.py
# ("DataLoader worker (pid %d) is killed by signal: " + strsignal(SIGBUS) + ". " + the shared-memory hint; an
# ostringstream in older trees, fmt::format in newer, the same words)
SHM_WAIT = traceback(SCRIPT, ("/workspace/train.py", 180, "main", "for batch in loader:"),
                     (f"{SITE}/torch/utils/data/dataloader.py", 1133, "_try_get_data",
                      "data = self._data_queue.get(timeout=timeout)"),
                     (f"{SITE}/torch/utils/data/_utils/signal_handling.py", 67, "handler",
                      "_error_if_any_worker_fails()"))
DATALOADER_SHM = [
    Message("dataloader_shm", "ZD407", "torch", "torch/csrc/DataLoader.cpp",
            ("ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared memory "
             "(shm).",), variant="worker"),
    Message("dataloader_shm", "ZD407", "torch", "torch/csrc/DataLoader.cpp",
            ("RuntimeError: DataLoader worker (pid 30882) is killed by signal: Bus error. It is possible that "
             "dataloader's workers are out of shared memory. Please try to raise your shared memory limit.",),
            SHM_WAIT, variant="main"),
]

# --- read after the seventh held-out set (2026-12-04): CPython's TypeError for text used as a number ---------------

# DeepSpeed reads some config values straight from the JSON and compares or divides with them; a value left text
# ("auto" that no Trainer filled, a quoted number) meets CPython's Objects/object.c do_richcompare "'%s' not supported
# between instances of '%.100s' and '%.100s'" (3.6+) or Objects/abstract.c binop_type_error "unsupported operand
# type(s) for %.100s: '%.100s' and '%.100s'", raised in DeepSpeed's own frame
CLIP = traceback(SCRIPT, ("/workspace/train.py", 174, "train", "model.step()"),
                 (f"{SITE}/deepspeed/runtime/engine.py", 1338, "step", "self._take_model_step(lr_kwargs)"),
                 (f"{SITE}/deepspeed/runtime/engine.py", 1257, "_take_model_step",
                  "if self.gradient_clipping() > 0.0:"))
PRINT_EVERY = traceback(SCRIPT, ("/workspace/train.py", 174, "train", "loss = engine.train_batch(data_iter)"),
                        (f"{SITE}/deepspeed/runtime/pipe/engine.py", 388, "train_batch",
                         "if self.global_steps % self.steps_per_print() == 0:"))
TEXT_AS_NUMBER = [
    Message("text_used_as_number", "ZD627", "deepspeed 0.3-0.19, python 3.6+", "cpython Objects/object.c",
            ("TypeError: '>' not supported between instances of 'str' and 'float'",), CLIP, "gradient_clipping"),
    Message("text_used_as_number", "ZD627", "deepspeed 0.3-0.19, python 3.6+", "cpython Objects/abstract.c",
            ("TypeError: unsupported operand type(s) for %: 'int' and 'str'",), PRINT_EVERY, "steps_per_print"),
]

# --- read after the eighth held-out set (2026-12-04): c10d's collective fingerprints under DETAIL -------------------

# torch/csrc/distributed/c10d/ProcessGroupWrapper.cpp (TORCH_DISTRIBUTED_DEBUG=DETAIL): operator<< prints a
# fingerprint as "CollectiveFingerPrint(SequenceNumber=%d, OpType=%s, TensorShape=[%s], TensorDtypes=%s,
# TensorDeviceTypes=%s)" (c10::toString of the device type lands on TensorOptions' overload), one with no tensors
# as "CollectiveFingerPrint(SequenceNumber=%dOpType=%s)"; verify_tensors raises "Detected mismatch between
# collectives on ranks. Rank %d is running collective: %s, but Rank %d is running collective: %s." and
# compute_collective_diff's "Collectives differ in the following aspects: " with "\t Sequence number: %dvs %d",
# "  Op type: %svs %s", "  Tensor %s: %svs %s" (torch 2.13 installed here prints these, a 2-rank gloo run). The
# first source (torch/lib/c10d, 1.9-1.10) names one rank: "Rank %d is running inconsistent collective: " and
# "CollectiveFingerPrint(OpType=%s, TensorShape=%s, TensorDtypes=%s, TensorDeviceTypes=%s" (no closing parenthesis)
CUDA_OPTIONS = ("TensorOptions(dtype=float (default), device=cuda, layout=Strided (default), requires_grad=false "
                "(default), pinned_memory=false (default), memory_format=(nullopt))")
MISMATCH = "RuntimeError: Detected mismatch between collectives on ranks. "


def fingerprint(sequence: int, op: str, shape: str | None = None, dtype: str = "Float") -> str:
    """operator<<(CollectiveFingerPrint), 2.x: tensors printed where the collective has any."""
    if shape is None:
        return f"CollectiveFingerPrint(SequenceNumber={sequence}OpType={op})"
    return (f"CollectiveFingerPrint(SequenceNumber={sequence}, OpType={op}, TensorShape=[{shape}], "
            f"TensorDtypes={dtype}, TensorDeviceTypes={CUDA_OPTIONS})")


def differ(*aspects: str) -> str:
    return "Collectives differ in the following aspects: " + "".join(aspects)


COLLECTIVE_MISMATCH = [
    # DeepSpeed#7568's situation: the fingerprints' lengths differ (a scalar against a 1-D bucket), so the other
    # rank's is its length decoded (7 = GATHER), sequence number 0
    Message("collective_mismatch", "ZD708", "torch 2.x-2.13", "c10d ProcessGroupWrapper.cpp",
            (MISMATCH + f"Rank 2 is running collective: {fingerprint(32, 'ALLREDUCE', '')}, but Rank 3 is running "
             f"collective: {fingerprint(0, 'GATHER')}."
             + differ("\t Sequence number: 32vs 0", "  Op type: ALLREDUCEvs GATHER", "  Tensor Tensor dtypes: Floatvs ",
                      f"  Tensor Tensor devices: {CUDA_OPTIONS}vs "),),
            ALL_REDUCE, "length"),
    Message("collective_mismatch", "ZD708", "torch 2.x-2.13", "c10d ProcessGroupWrapper.cpp",
            (MISMATCH + f"Rank 1 is running collective: {fingerprint(16150, 'ALLREDUCE', '344502304', 'Half')}, but "
             f"Rank 0 is running collective: {fingerprint(16150, 'ALLREDUCE', '497464352', 'Half')}."
             + differ("  Tensor Tensor shapes: 344502304vs 497464352"),), ALL_REDUCE, "shapes"),
    Message("collective_mismatch", "ZD708", "torch 2.x-2.13", "c10d ProcessGroupWrapper.cpp",
            (MISMATCH + f"Rank 1 is running collective: {fingerprint(101, 'BROADCAST', '1')}, but Rank 0 is running "
             f"collective: {fingerprint(101, 'ALLREDUCE', '1')}." + differ("  Op type: BROADCASTvs ALLREDUCE"),),
            ALL_REDUCE, "op"),
    Message("collective_mismatch", "ZD708", "torch 1.9-1.10", "c10d torch/lib/c10d/ProcessGroupWrapper.cpp",
            (MISMATCH + "Rank 0 is running inconsistent collective: CollectiveFingerPrint(OpType=ALLREDUCE, "
             f"TensorShape=[4096], TensorDtypes=Float, TensorDeviceTypes={CUDA_OPTIONS}",), ALL_REDUCE),
]

# --- CUDA OOM without an exception type: C10_CUDA_CHECK's cudaErrorMemoryAllocation as C++ prints it ------------
# A CUDA call outside the caching allocator that runs out of memory (a stream or an event, cuBLAS's workspace, a
# kernel launch) fails through c10_cuda_check_implementation (c10/cuda/CUDAException.cpp): "CUDA error: " and
# cudaGetErrorString(cudaErrorMemoryAllocation), "out of memory". Raised in a C++ thread (ProcessGroupNCCL's
# watchdog) or by libtorch without Python, it reaches the log as std::terminate's "terminate called after throwing
# an instance of '<type>'" and "  what():  <what()>": c10::Error's what() is the message, then "\n" and the
# backtrace c10::Error(SourceLocation, …) records, "Exception raised from <function> at <file>:<line> (most recent
# call first):" (c10/util/Exception.cpp compute_what, c10/util/Logging.cpp). TORCH_CHECK threw c10::Error in 2.0-2.1;
# latest throws c10::AcceleratorError. No Python type precedes the message.
OOM_ERROR = "out of memory"


def _terminate(cpp_type: str, versions: str, where: str) -> str:
    """std::terminate's report of the C10_CUDA_CHECK error, what() with its backtrace's head line."""
    message = cuda_check(versions, OOM_ERROR, "cudaErrorMemoryAllocation").split(": ", 1)[1]  # ends in "\n"
    return (f"terminate called after throwing an instance of '{cpp_type}'\n  what():  {message}\n"
            f"Exception raised from c10_cuda_check_implementation at {where} (most recent call first):")


CUDA_OOM_UNTYPED = [
    Message("cuda_oom", "ZD901", "torch 2.0-2.1", C10_CUDA + "; c10/util/Exception.cpp",
            (_terminate("c10::Error", "torch 2.0-2.1", "../c10/cuda/CUDAException.cpp:44"),), variant="terminate"),
    Message("cuda_oom", "ZD901", "torch latest", C10_CUDA + "; c10/util/Exception.cpp",
            (_terminate("c10::AcceleratorError", "torch latest", "/pytorch/c10/cuda/CUDAException.cpp:42"),),
            variant="terminate"),
    # the watchdog finds it first on a rank that is in a collective (ProcessGroupNCCL.cpp, 2.1), as for ZD903 above
    Message("cuda_oom", "ZD901", "torch 2.1 watchdog", "torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp",
            ("[E ProcessGroupNCCL.cpp:916] [Rank 3] NCCL watchdog thread terminated with exception: CUDA error: "
             f"{OOM_ERROR}{ASYNC_2_0}{DSA}",
             "terminate called after throwing an instance of 'std::runtime_error'\n  what():  [Rank 3] NCCL watchdog "
             f"thread terminated with exception: CUDA error: {OOM_ERROR}{ASYNC_2_0}{DSA}")),
]


# --- read after the held-out set of issue 33: a scale pinned at its floor, Slurm's task OOM kill ----------------

# deepspeed/runtime/fp16/fused_optimizer.py FP16_Optimizer._update_scale (and unfused_optimizer.py), verbose:
# print(f"\nGrad overflow on iteration {cur_iter}") and f"Reducing dynamic loss scale from {prev_scale} to
# {cur_scale}" since 0.1.0 (0be026e38), logger.info from 0.9.0 (91d63e022); cur_scale = max(cur_scale /
# scale_factor, min_loss_scale) never raises: at min_loss_scale 1 every overflow says "from 1 to 1" and skips on
PINNED = [f"\nGrad overflow on iteration {it}\nReducing dynamic loss scale from {a} to {b}"
          for it, a, b in ((1203, "4.0", "2.0"), (1204, "2.0", "1"), (1205, "1", "1"), (1206, "1", "1"),
                           (1207, "1", "1"))]
FLOOR = [
    Message("deepspeed_fp16_collapse", "ZD201", "deepspeed 0.1-0.19 FP16_Optimizer verbose",
            "deepspeed/runtime/fp16/fused_optimizer.py, unfused_optimizer.py", tuple(PINNED), variant="pinned_at_1"),
]

# Slurm, a step's task killed by its cgroup's OOM handler. slurmstepd (task/cgroup task_cgroup_memory.c, then
# cgroup/v1 and v2): error("Detected %"PRIu64" oom-kill event(s) in step %s cgroup. Some of your processes may
# have been killed by the cgroup out-of-memory handler.") 17.11.10 (dd576deca6), "in %ps" (StepId=J.S) from 20.11,
# error("Detected %"PRIu64" oom_kill event%s in %ps. Some of the step tasks have been OOM Killed.") 23.02
# (4d82fa26bb); log.c prefixes "slurmstepd: error: ". srun (launch.c): error("%s: %s %s: Out Of Memory", hosts,
# "task", tasks), "srun: error: " before it. With srun --label the tasks' lines carry "%*d: " (common/
# write_labelled_message.c _build_label: the task id, right-aligned to the widest), the rank the console names.
SLURM_OOM = [
    Message("host_oom_kill", "ZD405", "slurm 17.11.10-20.02", "slurmstepd task_cgroup_memory.c, srun launch.c",
            ("slurmstepd: error: Detected 1 oom-kill event(s) in step 4312.0 cgroup. Some of your processes may have "
             "been killed by the cgroup out-of-memory handler.", "srun: error: node07: task 2: Out Of Memory"),
            variant="srun"),
    Message("host_oom_kill", "ZD405", "slurm 20.11-22.05", "slurmstepd cgroup/v1 cgroup_v1.c, srun launch.c",
            ("slurmstepd: error: Detected 1 oom-kill event(s) in StepId=4312.0. Some of your processes may have been "
             "killed by the cgroup out-of-memory handler.", "srun: error: node07: task 2: Out Of Memory"),
            variant="srun"),
    Message("host_oom_kill", "ZD405", "slurm 23.02-latest", "slurmstepd task_cgroup_memory.c, srun launch.c",
            ("slurmstepd: error: Detected 1 oom_kill event in StepId=4312.0. Some of the step tasks have been OOM "
             "Killed.", "srun: error: node07: task 2: Out Of Memory"), variant="srun"),
]


# --- read after held-out set 10 (2026-12-06): watchdog lines cut after the op type -----------------------------
# The watchdog's line as torch 2.2-2.3 logs it (c10's "[E ProcessGroupNCCL.cpp:N]" behind TORCH_LOGS' "[rankR]:"),
# each cut after "OpType=OP, " as a paste kept it (huggingface/accelerate#2536 ends each with a '.'): two work
# items of one rank on two process groups, the second a timeout of its own.
C10_LOG_2_2 = "[rank3]:[E ProcessGroupNCCL.cpp:%d] "
CUT_TIMEOUTS = [
    Message("collective_timeout", "ZD701", "torch 2.2-2.3 cut after the op type", PGNCCL,
            (C10_LOG_2_2 % 523 + "[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=956300, "
                                 "OpType=_ALLGATHER_BASE, .",
             C10_LOG_2_2 % 523 + "[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1008, "
                                 "OpType=ALLREDUCE, NumelIn=."), variant="cut"),
]


MESSAGES: list[Message] = [*OOM, *CUDA, *DEVICE_MISMATCH, *NCCL_ERRORS, *TIMEOUTS, *CUT_TIMEOUTS, *ELASTIC_FAILURES,
                           *CPU_ALLOC,
                           *BATCH, *FP16, *LAUNCHER, *LATER, *ACCELERATE, *TRL, *KERNEL_OOM, *NCCL_CUDA, *BASH_JOB,
                           *NCCL_ASYNC, *FLOOR, *SLURM_OOM,
                           *DATALOADER_SHM, *TEXT_AS_NUMBER, *COLLECTIVE_MISMATCH, *CUDA_OOM_UNTYPED]
