"""Every crash message a library version prints, in every way a console shows it, names its rule.

The messages come from the libraries' format strings (``message_families.py``); this file wraps each the ways
consoles do, writes it into a log after a few launcher lines, and asks ``diagnose`` for the family's rule at
warning or error. One test per (message, wrapping), so a family's gaps show by version and by wrapping.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.corpus.score import CLAIMS
from tests.sources.message_families import MESSAGES, Message
from zerodoctor.pipeline.diagnose import diagnose
from zerodoctor.pipeline import rules_from

# What DeepSpeed's launcher prints before any rank runs (deepspeed/launcher/launch.py's own format strings), so
# the message is never the log's first line; of the wrappings only a terminal's (wrap80, wrap120) touches them.
PREAMBLE = [
    "[2024-05-01 09:58:12,377] [INFO] [launch.py:145:main] WORLD INFO DICT: {'localhost': [0, 1, 2, 3]}",
    "[2024-05-01 09:58:12,377] [INFO] [launch.py:151:main] nnodes=1, num_local_procs=4, node_rank=0",
    "[2024-05-01 09:58:12,378] [INFO] [launch.py:162:main] global_rank_mapping=defaultdict(<class 'list'>, "
    "{'localhost': [0, 1, 2, 3]})",
    "[2024-05-01 09:58:12,378] [INFO] [launch.py:163:main] dist_world_size=4",
    "[2024-05-01 09:58:12,378] [INFO] [launch.py:165:main] Setting CUDA_VISIBLE_DEVICES=0,1,2,3",
]
LOGGED = "[2024-05-01 10:00:00,123] [ERROR] [engine.py:12:step] "
RED, RESET = "\x1b[1;31m", "\x1b[0m"
MPI_TAG = "[1,3]<stderr>:"
SRUN_LABEL = " 2: "
MID_LINE = 30
BAR = "\r".join(f" {p}%|{'█' * (p // 10)}{' ' * (10 - p // 10)}| {p * 10}/1000 [12:0{p % 10}<20:31,  1.95s/it]"
                for p in (35, 36, 37))


def printed(m: Message, render: Callable[[str], str] = str) -> list[str]:
    """The records in print order, each through ``render``, the traceback head just before the exception."""
    lines: list[str] = []
    for i, record in enumerate(m.records):
        if m.frames and i == len(m.records) - 1:
            lines += m.frames
        lines += render(record).split("\n")
    return lines


def rank_prefixed(m: Message) -> list[str]:
    """torchrun's ``[rank3]:`` on every line (2.4's C++ log lines carry it already)."""
    return [line if line.startswith("[rank3]:") else f"[rank3]:{line}" for line in printed(m)]


def srun_labelled(m: Message) -> list[str]:
    """Slurm's ``srun --label``: each line a task wrote carries ``%*d: `` (common/write_labelled_message.c
    _build_label, the task id right-aligned to the widest of 16 tasks); srun's own lines ("srun: error: …") none."""
    return [line if line.startswith("srun: ") else f"{SRUN_LABEL}{line}" for line in printed(m)]


def mpirun_tagged(m: Message) -> list[str]:
    """Open MPI 4.x's ``mpirun --tag-output``: ``[1,3]<stderr>:`` ("[%s,%s]<%s>:", orte/mca/iof/base/
    iof_base_output.c) before every line and again where a read of the rank's pipe began mid-line: between the
    exception's type and its message, which Python wrote apart (deepspeedai/DeepSpeed#1834's
    "RuntimeError[1,19]<stderr>:: NCCL communicator was aborted")."""
    lines = printed(m)
    if m.frames:
        last = len(lines) - len(m.records[-1].split("\n"))
        lines[last] = lines[last].replace(": ", f"{MPI_TAG}: ", 1)
    return [MPI_TAG + line for line in lines]


def logged(m: Message) -> list[str]:
    """Each record through a logging.Formatter: the prefix on its first line, continuation lines bare; a logged
    exception keeps its type name. The traceback head is left out: a logger is handed the message, not the stack."""
    return [line for record in m.records for line in (LOGGED + record).split("\n")]


def coloured(m: Message) -> list[str]:
    """A colouring handler: each record between SGR red and reset, which land on its first and last lines."""
    return printed(m, lambda record: f"{RED}{record}{RESET}")


def rich_box(m: Message) -> list[str]:
    """rich's traceback: the frames in a box, the exception under it, wrapped at the 80-column console's width."""
    width = 80
    title = " Traceback (most recent call last) "
    side = (width - 2 - len(title)) // 2
    box = [f"╭{'─' * side}{title}{'─' * (width - 2 - side - len(title))}╮"]
    frames = m.frames[1:]
    for where, code in zip(frames[::2], frames[1::2]):
        path, line, func = where.split('"')[1], where.split("line ")[1].split(",")[0], where.split(" in ")[-1]
        for text in (f"{path}:{line} in {func}", "", f"❱ {line} │   {code.strip()}", ""):
            for chunk in textwrap.wrap(text, width - 4, break_on_hyphens=False) or [""]:
                box.append(f"│ {chunk.ljust(width - 4)} │")
    box.append(f"╰{'─' * (width - 2)}╯")
    head = [line for record in m.records[:-1] for line in record.split("\n")]
    exception = [chunk for line in m.records[-1].split("\n")
                 for chunk in textwrap.wrap(line, width, break_on_hyphens=False) or [""]]
    return head + box + exception


def after_tqdm(m: Message) -> list[str]:
    """The first line printed glued to a progress bar that never ended its line (tqdm redraws with ``\\r``)."""
    lines = printed(m)
    return [f"\r{BAR}{lines[0]}", *lines[1:]]


def cut(lines: list[str], width: int) -> list[str]:
    """A terminal's copy: every line cut at the width, mid-word."""
    return [line[i:i + width] for line in lines for i in range(0, max(len(line), 1), width)]


def started_mid_line(m: Message) -> list[str]:
    """The log begins inside the message's first line (a rotated file, a scroll-back): its first 30 characters
    are gone, with the launcher lines and traceback head before them. 30 takes the exception type and the first
    words, and leaves what a reader needs, numbers included (an OOM's request and capacity)."""
    lines = printed(m)
    first = len(m.frames) if len(m.records) == 1 else 0   # a lone exception comes after its traceback head
    return [lines[first][MID_LINE:], *lines[first + 1:]]


WRAPPINGS: dict[str, Callable[[Message], list[str]]] = {
    "plain": printed, "rank_prefix": rank_prefixed, "timestamp_level": logged, "ansi": coloured, "rich": rich_box,
    "tqdm": after_tqdm, "wrap80": lambda m: cut(printed(m), 80), "wrap120": lambda m: cut(printed(m), 120),
    "mid_line": started_mid_line, "mpirun_tag": mpirun_tagged, "srun_label": srun_labelled,
}
TERMINAL_WIDTH = {"wrap80": 80, "wrap120": 120}   # these cut the launcher lines too


def _applies(m: Message, wrapping: str) -> bool:
    """Pairs left out, as no reader could expect to read them: rich draws tracebacks, so a message that is no
    Python exception (a C++ log line, DeepSpeed's own records) never reaches one; and a one-line message shorter
    than twice the mid-line cut leaves a word or two ("RuntimeError: Operation timed out!" becomes "out!")."""
    if wrapping == "rich":
        return bool(m.frames)
    if wrapping == "mid_line":
        return len(m.records) > 1 or "\n" in m.records[0] or len(m.records[0]) >= 2 * MID_LINE
    return True


MID_LINE_CUT = "the cut takes the words that name the family"
# The words are left but "ValueError: " is gone: a bare sentence is no exception, and a configuration's refusal is
# not among the families a line may show on its own (a family without keywords, messages/crashes.py).
NO_EXCEPTION_TYPE = "the cut takes the exception's type: the sentence left is read as no error"
# Known limits, each a strict expected failure (a fix shows as a failure to update): where the wrapping cuts
# the very words a family is named by. A log that starts mid-line keeps its first line's tail only; for these
# one-line messages the 30 characters cut hold the family's name ("CUDA error: an i" of "illegal memory
# access"), and matching on what is left (message tails other text ends with too) would trade precision away.
WRAP_CUTS_SCALES = ("every overflow line is cut inside 'Attempted lo' / 'ss scale': the scales that make a collapse "
                    "are lost")
NO_FRAMES = ("no frame is left to say DeepSpeed raised it, and the same words raised in the user's code are "
             "no config fault")
KNOWN_LIMITS: dict[str, str] = {
    **{f"text_used_as_number-deepspeed_0.3-0.19_python_3.6+-{v}-{w}": f"{why}: {NO_FRAMES}"
       for v in ("gradient_clipping", "steps_per_print")
       for w, why in (("timestamp_level", "a logger is handed the message, not the stack"),
                      ("mid_line", "the log starts after the traceback"),
                      ("wrap80", "the wrap cuts DeepSpeed's frame line, its site-packages path longer than "
                                 "80 columns"))},
    "host_oom_kill-deepspeed_0.3.12-0.5.7-rich": "rich wraps 'died with <Signals.SIGKILL:' / '9>.': the number is read "
                                                 "line by line, and the exception is the launcher's, "
                                                 "named by no family",
    "collective_timeout-torch_2.4-latest-watchdog_stuck-wrap80": "the wrap cuts 'watchdog got stuck' itself",
    **{f"illegal_memory_access-nccl_{v}-wrap80": "the wrap cuts the family's words ('an illeg' / 'al memory access'): "
                                                 "a line that kills without a traceback is read alone"
       for v in ("2.3.5-latest-CUDACHECK", "2.19.1-2.30.4-CUCHECK", "2.30.7-latest-CUCHECK")},
    "deepspeed_fp16_collapse-deepspeed_0.3.12-0.19_FP16_Optimizer-no_zero-wrap80": WRAP_CUTS_SCALES,
    "deepspeed_fp16_collapse-deepspeed_0.3.12-0.5.3_ZeRO-2-wrap80": WRAP_CUTS_SCALES,
    "collective_timeout-torch_1.8-2.0_blocking_wait-blocking_wait-mid_line": MID_LINE_CUT,
    "cuda_error-torch_1.0-1.10_THC-cublas-mid_line": MID_LINE_CUT,
    "cuda_error-torch_1.0-1.8-no_kernel_image-mid_line": MID_LINE_CUT,
    "cuda_error-torch_1.10-1.13-no_kernel_image-mid_line": MID_LINE_CUT,
    "cuda_error-torch_1.10-latest-cublas_gemmex_bf16-mid_line": MID_LINE_CUT,
    "cuda_error-torch_1.4-latest-cublas_create-mid_line": MID_LINE_CUT,
    "cuda_error-torch_1.4-latest-cublas_sgemm-mid_line": MID_LINE_CUT,
    "cuda_error-torch_2.0-2.1-no_kernel_image-mid_line": MID_LINE_CUT,
    "cuda_error-torch_2.4-no_kernel_image-mid_line": MID_LINE_CUT,
    "cuda_error-deepspeed_0.3.1-0.19-ds_strided_batched_gemm-mid_line": MID_LINE_CUT,
    "deepspeed_batch_nonpositive-deepspeed_0.1-0.19-grad_acc-mid_line": MID_LINE_CUT,
    "deepspeed_batch_nonpositive-deepspeed_0.1-0.19-micro-mid_line": MID_LINE_CUT,
    "device_mismatch-torch_1.0-1.5_TH_bindings-mid_line": MID_LINE_CUT,
    "device_mismatch-torch_1.6-1.7_addbmm-mid_line": MID_LINE_CUT,
    "device_mismatch-torch_1.6-latest_TensorIterator-mid_line": MID_LINE_CUT,
    "device_mismatch-torch_1.9-1.13-mid_line": MID_LINE_CUT,
    "device_mismatch-torch_2.0-latest-mid_line": MID_LINE_CUT,
    "host_alloc_failed-torch_1.0-1.1-mid_line": MID_LINE_CUT,
    "illegal_memory_access-torch_1.0-1.8-mid_line": MID_LINE_CUT,
    "illegal_memory_access-torch_1.10-1.13-mid_line": MID_LINE_CUT,
    "illegal_memory_access-torch_2.0-2.1-mid_line": MID_LINE_CUT,
    "illegal_memory_access-torch_2.4-mid_line": MID_LINE_CUT,
    "nccl_error-torch_1.0-1.2-mid_line": MID_LINE_CUT,
    "nccl_error-torch_1.3-1.7-mid_line": MID_LINE_CUT,
    "host_oom_kill-torch_1.0-2.13-mid_line": MID_LINE_CUT,
    "host_oom_kill-bash_jobs.c_-shell-mid_line": MID_LINE_CUT,
    "host_oom_kill-bash_jobs.c_-script-mid_line": MID_LINE_CUT,
    "collective_timeout-torch_1.8-1.13-mid_line": MID_LINE_CUT,
    "deepspeed_config_rejected-deepspeed_0.7-0.14-mid_line": MID_LINE_CUT,
    "deepspeed_config_rejected-deepspeed_0.15-0.19-mid_line": MID_LINE_CUT,
    "zero_section_missing-accelerate_installed_-mid_line": MID_LINE_CUT,
    **{f"trl_generations_indivisible-trl_{v}-mid_line": NO_EXCEPTION_TYPE
       for v in ("0.15-0.16-train", "0.15-0.16-eval", "0.17-train", "0.18-0.19-eval", "0.18-latest-global_batch",
                 "0.20-latest-num_generations", "0.27-latest-eval")},
}


def _case(m: Message, wrapping: str):
    case_id = f"{m.id}-{wrapping}"
    marks = [pytest.mark.xfail(reason=KNOWN_LIMITS[case_id], strict=True)] if case_id in KNOWN_LIMITS else []
    return pytest.param(m, wrapping, id=case_id, marks=marks)


CASES = [_case(m, w) for m in MESSAGES for w in WRAPPINGS if _applies(m, w)]


@pytest.fixture(scope="module")
def rules():
    return rules_from()


def _claimed(path: Path, rules) -> set[str]:
    report = diagnose([path], rules=rules, input_format="text")
    return {f.rule for f in report.findings if f.severity in CLAIMS}


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize(("message", "wrapping"), CASES)
def test_the_family_rule_fires(tmp_path: Path, rules, message: Message, wrapping: str) -> None:
    before = cut(PREAMBLE, TERMINAL_WIDTH[wrapping]) if wrapping in TERMINAL_WIDTH else PREAMBLE
    block = WRAPPINGS[wrapping](message)
    claimed = _claimed(_write(tmp_path / "console.log", block if wrapping == "mid_line" else [*before, *block]), rules)
    assert message.rule in claimed, f"{message.source} ({message.versions}): expected {message.rule}, got {claimed}"


def test_the_launcher_lines_alone_claim_nothing(tmp_path: Path, rules) -> None:
    """The rule a test sees comes from the message, not from the lines put before it."""
    assert _claimed(_write(tmp_path / "console.log", PREAMBLE), rules) == set()
