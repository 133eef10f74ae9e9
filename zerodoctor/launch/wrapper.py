"""Wrapper: ``zerodoctor run -- CMD`` → CMD running untouched, its output teed to ``console.log``.

The command gets its own process group, so SIGINT/SIGTERM/SIGHUP/SIGQUIT reach every
process of the job (launcher and ranks) through one ``killpg``. Its stdout and stderr
reach ours byte for byte as they are written: through a raw pseudo-terminal when ours is
a terminal (so progress bars and colours draw as before), through a pipe otherwise. The
exit status is the command's, 128+N when a signal N killed it.
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import secrets
import signal
import socket
import subprocess
import sys
import termios
import threading
import time
import tty
from pathlib import Path
from typing import BinaryIO, Callable

from zerodoctor.probe import RUN_DIR_ENV, RUN_ID_ENV
from zerodoctor.probe.crash import FAULT_SUFFIX
from zerodoctor.probe.privacy import RUN_DIR_MODE, file_mode, redact_argv, redact_config
from zerodoctor.launch.build_lock import BuildLockWatch
from zerodoctor.launch.rank_deaths import closing_events, teardown_events
from zerodoctor.sources.names import rank_event_files, rank_of

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
SITE_DIR = ".probe"  # inside the run directory: the generated sitecustomize.py
CONFIG_COPY = "ds_config.json"


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)


def exit_status(returncode: int) -> int:
    """Popen's -N (killed by signal N) → the shell's 128+N."""
    return 128 - returncode if returncode < 0 else returncode


class _Tee:
    """Copies one output stream of the child to our fd and to the shared console log."""

    def __init__(self, target_fd: int, log: BinaryIO, lock: threading.Lock) -> None:
        self.target_fd, self.log, self.lock = target_fd, log, lock
        if os.isatty(target_fd):
            self.read_fd, self.child_fd = pty.openpty()
            tty.setraw(self.child_fd)  # no newline translation, no echo: bytes pass as written
            try:
                fcntl.ioctl(self.child_fd, termios.TIOCSWINSZ, fcntl.ioctl(target_fd, termios.TIOCGWINSZ, b"\0" * 8))
            except OSError:
                pass
        else:
            self.read_fd, self.child_fd = os.pipe()
        self.thread = threading.Thread(target=self._copy, daemon=True)

    def start(self) -> None:
        os.close(self.child_fd)  # the child holds its copy; EOF comes when it (and its children) exit
        self.thread.start()

    def _copy(self) -> None:
        target_ok = True
        while True:
            try:
                data = os.read(self.read_fd, 65536)
            except OSError:  # EIO: the pty's last writer is gone
                break
            if not data:
                break
            if target_ok:
                target_ok = _write_all(self.target_fd, data)
            with self.lock:
                self.log.write(data)
                self.log.flush()
        os.close(self.read_fd)


def _write_all(fd: int, data: bytes) -> bool:
    """Write everything; False once our own output is gone (e.g. piped into ``head``)."""
    view = memoryview(data)
    try:
        while view:
            view = view[os.write(fd, view):]
    except OSError:
        return False
    return True


def _write_json(path: Path, data: dict) -> None:
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, file_mode(path.parent))
    with os.fdopen(fd, "w") as f:
        f.write(json.dumps(data, indent=2) + "\n")
    tmp.replace(path)


def child_env(run_dir: Path, run_id: str, site_dir: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ if base is None else base)
    # PYTHONPATH is the one channel DeepSpeed's multi-node runner forwards (EXPORT_ENVS has
    # 'PYTHON'), and the generated sitecustomize carries the run dir itself.
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(site_dir), env.get("PYTHONPATH")) if p)
    env[RUN_DIR_ENV], env[RUN_ID_ENV] = str(run_dir), run_id
    env.setdefault("PYTHONUNBUFFERED", "1")  # a pipe would otherwise make Python buffer 8 KiB
    # Where NCCL's flight recorder dumps on a timeout (if TORCH_NCCL_DUMP_ON_TIMEOUT=1): beside the
    # rank files, which is where diagnose looks for them, instead of /tmp on each node.
    env.setdefault("TORCH_FR_DUMP_TEMP_FILE", str(run_dir / "nccl_trace_rank_"))
    return env


def run(command: list[str], runs_dir: Path, name: str | None = None, *, append: bool = False,
        mode: int = RUN_DIR_MODE, directory: Path | None = None, env: dict[str, str] | None = None,
        forwarded: list[int] | None = None, started: Callable[[int], None] | None = None) -> int:
    """Run ``command`` with the probe injected; return its exit status (128+N for signal N).

    ``append`` lets the wrappers of one multi-node job share a run directory: each node's
    ranks write their own ``rank-<r>.jsonl``. Without it, a directory that already holds rank
    files is an earlier attempt, whose events the probe would otherwise append to.
    A new run directory gets ``mode`` (0700: only you can read the run), its files the same
    bits without execute; the command's own files keep the umask it always had.
    ``directory`` puts the run elsewhere than ``runs_dir/name`` (an attempt of fix-and-resume), ``env``
    is the environment to start from (default ours), each signal forwarded to the job is appended
    to ``forwarded``, and ``started`` is told the job's process group once it runs.
    """
    from zerodoctor import __version__
    from zerodoctor.probe.bootstrap import write_site

    run_id = name or new_run_id()
    if problem := bad_name(run_id):
        raise RunError(f"--name {run_id!r}: {problem}")
    run_dir = (directory or runs_dir / run_id).resolve()
    if not append and rank_event_files(run_dir):
        raise RunError(f"{run_dir}: already holds the rank files of an earlier run; choose another --name "
                       "(or pass --append on every node of one multi-node job)")
    if not run_dir.is_dir():
        run_dir.mkdir(parents=True, exist_ok=True)
        run_dir.chmod(mode)  # exactly what was asked, whatever the umask
    site_dir = write_site(run_dir / SITE_DIR, run_dir, run_id)
    for path, bits in ((site_dir, run_dir.stat().st_mode & 0o777), (site_dir / "sitecustomize.py", file_mode(run_dir))):
        path.chmod(bits)
    meta = {"run": run_id, "argv": redact_argv(command), "cwd": os.getcwd(), "host": socket.gethostname(),
            "zerodoctor": __version__, "started": time.time()}
    _write_json(run_dir / "meta.json", meta)
    lock = threading.Lock()
    console = os.open(run_dir / "console.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC,
                      file_mode(run_dir))
    with os.fdopen(console, "ab") as log:
        tees = [_Tee(sys.stdout.fileno(), log, lock), _Tee(sys.stderr.fileno(), log, lock)]
        job_env = child_env(run_dir, run_id, site_dir, env)
        try:
            proc = subprocess.Popen(command, stdout=tees[0].child_fd, stderr=tees[1].child_fd,
                                    env=job_env, process_group=0)
        except OSError as exc:
            for tee in tees:
                os.close(tee.child_fd)
                os.close(tee.read_fd)
            raise RunError(f"{command[0]}: {exc.strerror}") from None
        for tee in tees:
            tee.start()
        lock_watch = BuildLockWatch(run_dir, run_id, job_env)  # a silent wait on a stale build lock: wrapper.jsonl
        lock_watch.start()
        previous = _forward_signals(proc.pid, forwarded)
        if started is not None:
            started(proc.pid)
        try:
            returncode = _wait(proc)
        finally:
            lock_watch.stop()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        for tee in tees:
            tee.thread.join(timeout=5)  # a daemon left behind by the job may hold the pipe open
    meta.update(ended=time.time(), exit_code=exit_status(returncode),
                signal=-returncode if returncode < 0 else None)
    meta["duration_s"] = meta["ended"] - meta["started"]
    _write_json(run_dir / "meta.json", meta)
    finish_run_dir(run_dir, run_id, returncode)
    return exit_status(returncode)


def finish_run_dir(run_dir: Path, run_id: str, returncode: int) -> None:
    """After the job: close rank files of ranks that died hard, copy the config, count missing ranks."""
    from zerodoctor import events

    starts = []
    for path in rank_event_files(run_dir):  # a copy beside them (rank-0.1.jsonl) is no rank's: left alone
        first, last = _first_and_last(path)
        if first.get("kind") == "run_start":
            starts.append(first)
        fault_file, rank = path.with_suffix(FAULT_SUFFIX), rank_of(path.name)
        if last.get("kind") != "run_end":  # SIGKILL, OOM killer, abort: the rank could not say it ended
            closing = closing_events(run_dir, rank, fault_file)
            if not any(e["kind"] == "run_end" for e in closing):
                closing.append({"kind": "run_end", "exit_code": exit_status(returncode) if returncode >= 0 else None,
                                "signal": -returncode if returncode < 0 else None})
        else:
            closing = teardown_events(run_dir, rank, fault_file) if returncode else []
        if closing:
            now = time.time()
            lines = [json.dumps(events.new(e.pop("kind"), t=now, run=run_id, rank=rank, **e)) for e in closing]
            with open(path, "ab") as f:
                # a rank SIGKILLed mid-write left half a line: ours starts on a fresh one, or both are lost
                fresh = b"\n" if not _ends_in_newline(path) else b""
                f.write(fresh + "\n".join(lines).encode() + b"\n")
        if fault_file.is_file() and fault_file.stat().st_size == 0:
            fault_file.unlink()  # the fault handler's file of a rank that did not crash
    if not starts:
        return
    first = min(starts, key=lambda e: e.get("rank", 0))
    if first.get("config") and not (run_dir / CONFIG_COPY).exists():
        # a rank file from an older probe is not redacted
        _write_json(run_dir / CONFIG_COPY, redact_config(first["config"]))
    world = first.get("world_size") or 0
    if len(starts) < world:
        print(f"zerodoctor: only {len(starts)} of {world} ranks wrote events to {run_dir}; on several nodes "
              "that directory must be on a filesystem every node shares (see docs/run.md)",
              file=sys.stderr, flush=True)


def _first_and_last(path: Path, tail_bytes: int = 1 << 20) -> tuple[dict, dict]:
    """The first and last complete event of a rank file ({} where unreadable)."""
    with open(path, "rb") as f:
        head = f.readline()
        f.seek(max(0, f.seek(0, os.SEEK_END) - tail_bytes))
        lines = [line for line in f.read().split(b"\n") if line.strip()]
    return load_event(head), load_event(lines[-1]) if lines else {}


def _ends_in_newline(path: Path) -> bool:
    """Whether the file is empty or its last byte ends a line."""
    with open(path, "rb") as f:
        if f.seek(0, os.SEEK_END) == 0:
            return True
        f.seek(-1, os.SEEK_END)
        return f.read(1) == b"\n"


def load_event(line: bytes) -> dict:
    """One line of a rank file → its event as a dict ({} where it is no JSON object)."""
    try:
        value = json.loads(line)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


class RunError(RuntimeError):
    """The command could not be started; the message names it."""


MAX_NAME = 200  # a run id is a directory name (255 bytes on most filesystems) and is shown in every report


def bad_name(name: str) -> str | None:
    """Why ``name`` cannot be a run id, or None: it names one directory under --runs-dir and is printed
    in reports and written into the generated ``sitecustomize.py``, so it is one plain path component."""
    if name in (".", ".."):
        return "not a directory name"
    if "/" in name:
        return "holds a path separator; a run id is one directory name"
    if any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 for c in name):
        return "holds a control character (a newline, an escape…)"
    if len(name.encode("utf-8", "surrogatepass")) > MAX_NAME:
        return f"longer than {MAX_NAME} bytes"
    return None


def _forward_signals(pgid: int, forwarded: list[int] | None = None) -> dict[int, object]:
    def forward(signum: int, frame: object) -> None:
        if forwarded is not None:
            forwarded.append(signum)
        try:
            os.killpg(pgid, signum)
        except ProcessLookupError:
            pass  # the job already ended

    return {sig: signal.signal(sig, forward) for sig in FORWARDED}


def _wait(proc: subprocess.Popen) -> int:
    while True:
        try:
            return proc.wait()
        except InterruptedError:  # pragma: no cover - PEP 475 retries; kept for odd platforms
            continue
