"""Fix and resume, the loop: run an attempt → judge it → relaunch with the next fix, or stop with the job's status.

After each attempt that failed (non-zero exit, or stopped by the live judgement, ``live.py``), its
run directory is diagnosed like ``diagnose`` would. The first error finding the policy covers and that has a fix the
policy allows and no attempt
tried yet picks the fix; the config is patched with it (plus the fixes that helped before), checked
by DeepSpeed's own parser (a config it refuses is never launched: the next fix is taken), written
next to the original, and the command is relaunched from the newest checkpoint saved before the
fault's first step. A fix did not help when, after it, the same rule or one of its category fires
again, whether the attempt failed or merely "succeeded" with the fault turned into skipped steps:
the next fix of the original finding is tried instead, never the same one twice.

Never worse than the job alone: the exit status is the last attempt's, a signal the user sent
(Ctrl-C, scancel) stops everything, and if this loop itself fails the job's own status is returned.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from zerodoctor.config import deepspeed_validate
from zerodoctor.fixes.patch import merge_patch, patch_diff
from zerodoctor.probe.privacy import RUN_DIR_MODE, file_mode, redact_argv
from zerodoctor.probe.resume import FIX_FILE
from zerodoctor.resume import attempts
from zerodoctor.resume.checkpoints import Saved, newest_before, saved_in
from zerodoctor.resume.live import EVERY_S, LiveJudge
from zerodoctor.resume.policy import Policy, fix_key
from zerodoctor.resume.relaunch import RelaunchError, config_argument, relaunch_argv
from zerodoctor.rulebook.finding import Finding, Fix
from zerodoctor.launch.wrapper import RunError, bad_name, load_event, new_run_id, run
from zerodoctor.sources.names import attempt_run_id, rank_event_files


@dataclass(frozen=True)
class Options:
    policy: Policy
    max_restarts: int = 2
    resume_arg: str | None = None
    config_arg: str | None = None
    allow_scratch: bool = False
    live_every_s: float = EVERY_S  # 0: judge only after the job exits


@dataclass
class Next:
    """The attempt to launch: its command, the environment it adds, the patch the probe keeps across the load."""

    argv: list[str]
    env: dict[str, str]
    patch: dict[str, Any]


def say(message: str) -> None:
    print(f"zerodoctor: {message}", file=sys.stderr, flush=True)


def fix_and_resume(command: list[str], runs_dir: Path, name: str | None, options: Options, *,
                   append: bool = False, mode: int = RUN_DIR_MODE) -> int:
    """Run ``command`` as attempt 1 of run ``name`` and relaunch it with fixes as ``options`` allow; its exit status."""
    run_id = name or new_run_id()
    if problem := bad_name(run_id):
        raise RunError(f"--name {run_id!r}: {problem}")
    run_dir = (runs_dir / run_id).resolve()
    trail = attempts.load(run_dir) if append else None
    if trail is None and run_dir.is_dir() and any(run_dir.iterdir()):
        raise RunError(f"{run_dir}: already holds an earlier run; choose another --name "
                       "(or pass --append to pick up a fix-and-resume run where it stopped)")
    run_dir.mkdir(parents=True, exist_ok=True)
    run_dir.chmod(mode)
    base_env = dict(os.environ)  # before anything here imports DeepSpeed (which sets DS_ACCELERATOR)
    if trail is None:
        trail = {"run": run_id, "policy": options.policy.name, "on": list(options.policy.only),
                 "max_restarts": options.max_restarts, "command": redact_argv(command), "cwd": os.getcwd(),
                 "attempts": [], "kept": [], "trial": None, "tried": []}
        pending: Next | None = Next(list(command), {}, {})
    else:
        pending = _pick_up(run_dir, trail, command, options)
    code = trail["attempts"][-1].get("exit_code", 1) if trail["attempts"] else 1
    while pending is not None:
        forwarded: list[int] = []
        if not trail["attempts"] or "exit_code" in trail["attempts"][-1]:
            trail["attempts"].append({"attempt": len(trail["attempts"]) + 1, "argv": redact_argv(pending.argv)})
        record = trail["attempts"][-1]
        number = record["attempt"]
        directory = attempts.attempt_dir(run_dir, number)
        directory.mkdir(exist_ok=True)
        directory.chmod(mode)
        if pending.patch:
            attempts.write_private(directory / FIX_FILE, json.dumps(pending.patch, indent=2) + "\n",
                                   file_mode(directory))
        record["started"] = time.time()
        attempts.save(run_dir, trail, file_mode(run_dir))
        live = LiveJudge(directory, attempt_run_id(run_id, number), lambda f: _wanted(f, trail, options), say,
                         every_s=options.live_every_s)
        try:
            code = run(pending.argv, runs_dir, attempt_run_id(run_id, number), mode=mode,
                       directory=directory, env={**base_env, **pending.env}, forwarded=forwarded,
                       started=live.started if options.live_every_s else None)
        finally:
            live.stop()
        record.update(exit_code=code, ended=time.time())
        if live.finding is not None:
            record["stopped_live"] = live.finding.to_json()
        try:
            pending = _decide(run_dir, trail, command, options, code, forwarded, live.finding)
        except KeyboardInterrupt:  # Ctrl-C while the attempt was judged: as a signal during it
            trail["outcome"], pending = "interrupted while judging the attempt: not restarted", None
        except Exception as exc:  # noqa: BLE001 - never worse than the job alone: its status stands
            trail["outcome"] = f"fix-and-resume failed: {type(exc).__name__}: {exc}"
            pending = None
            say(f"{trail['outcome']}; exiting with the job's own status {code}")
        attempts.save(run_dir, trail, file_mode(run_dir))
    return code


def _pick_up(run_dir: Path, trail: dict[str, Any], command: list[str], options: Options) -> Next | None:
    """``--append``: continue a trail whose wrapper was killed, from the last thing it recorded."""
    last = trail["attempts"][-1] if trail["attempts"] else None
    if last is None:
        return Next(list(command), {}, {})
    directory = attempts.attempt_dir(run_dir, last["attempt"])
    if "exit_code" in last:  # the decision after it was not saved: make it again
        return _decide(run_dir, trail, command, options, last["exit_code"], [])
    meta = _read_json(directory / "meta.json")
    if "exit_code" in meta:  # it ran to the end; the wrapper died before recording it
        last["exit_code"] = meta["exit_code"]
        return _decide(run_dir, trail, command, options, last["exit_code"], [])
    if alive := _ranks_alive(directory):
        raise RunError(f"{directory}: attempt {last['attempt']} still runs (rank pid {', '.join(map(str, alive))} on "
                       "this host): stop it or let it end before picking up with --append")
    say(f"picking up attempt {last['attempt']}: relaunching it as it was decided")
    checkpoint = Saved(**last["resumed_from"]) if last.get("resumed_from") else None
    config = last.get("config")
    argv = (relaunch_argv(command, options.config_arg, Path(config), options.resume_arg, checkpoint,
                          (_original_config(trail, command, options), json.loads(Path(config).read_text())))
            if config else list(command))
    for stale in rank_event_files(directory):  # the interrupted start's events: its steps would repeat
        stale.rename(stale.with_suffix(".interrupted"))
    return Next(argv, _env_of(trail), _read_json(directory / FIX_FILE))


def _decide(run_dir: Path, trail: dict[str, Any], command: list[str], options: Options, code: int,
            forwarded: list[int], live: Finding | None = None) -> Next | None:
    """After attempt K ended with ``code``: the next attempt, or None with the outcome recorded.

    ``live``: the finding for which the live judgement stopped the attempt; it leads the attempt's findings
    (judged again after the end, a hang's silence is no longer measured against the wall clock)."""
    record = trail["attempts"][-1]
    number = record["attempt"]
    directory = attempts.attempt_dir(run_dir, number)

    def stop(outcome: str) -> None:
        trail["outcome"] = record["decision"] = outcome
        trail["exit_code"] = code
        if code or number > 1:  # a first attempt that succeeded goes as it would without the flag: silently
            say(f"attempt {number} exited {code}: {outcome}")

    if forwarded:
        return stop(f"stopped by signal {forwarded[0]} sent to the wrapper: not restarted")
    if _fix_not_in_effect(directory):
        return stop("fix not in effect (the probe stopped the attempt: see its fix_check event)")
    if code == 0 and trail["trial"] is None:
        return stop("succeeded" if number == 1 else "succeeded with the fixes kept")
    findings = _findings(directory)
    if live is not None:
        findings = [live, *(f for f in findings if f.rule != live.rule)]
    covered = [f for f in findings if options.policy.covers(f)]
    record["findings"] = [f.to_json() for f in covered]
    trial = trail["trial"]
    persisting = next((f for f in covered if trial and (f.rule == trial["rule"] or f.category == trial["category"])),
                      None)
    if trial is not None and persisting is None:
        trail["kept"].append(trial)  # its fault did not come back: the fix stays in every later attempt
        trail["trial"] = None
        if code == 0:
            return stop(f"fixed: {trial['rule']} did not recur after '{trial['title']}'")
    if trial is not None and persisting is not None:
        say(f"attempt {number}: '{trial['title']}' did not help ({persisting.rule} {persisting.name} fired again)")
    if len(trail["attempts"]) - 1 >= options.max_restarts:
        return stop(f"--max-restarts {options.max_restarts} reached")
    if persisting is not None:
        source, fault = _finding(trail["trial"]["finding"]), persisting
    else:
        source = fault = next((f for f in covered if _untried(f, trail, options)), None)
        if source is None:
            if covered:
                kind = "safe " if options.policy.name == "safe" else ""
                return stop(f"no {kind}fix for {', '.join(f.rule for f in covered)} under policy "
                            f"{options.policy.name}: not restarted")
            return stop("no error finding the policy covers: not restarted")
    chosen = _choose(source, trail, options, command, directory)
    if chosen is None:
        return stop(f"no fix left for {source.rule} {source.name}")
    fix, after, before, verdict_text = chosen
    fault_step = _fault_step(fault, record)
    saved = [s for k in range(1, number + 1) for s in saved_in(attempts.attempt_dir(run_dir, k))]
    checkpoint = newest_before(saved, fault_step, Path(trail["cwd"]))
    if checkpoint is None and not options.allow_scratch:
        return stop(f"no checkpoint saved before step {fault_step}; not restarted from scratch "
                    "(pass --allow-restart-from-scratch)")
    _, _, original = config_argument(command, options.config_arg)
    out = _write_patched(Path(trail["cwd"]) / original, before, after, trail["run"], number + 1, run_dir)
    argv = relaunch_argv(command, options.config_arg, out, options.resume_arg, checkpoint, (before, after))
    trail["trial"] = {"rule": source.rule, "category": source.category, "key": fix_key(source.rule, fix),
                      "title": fix.title, "safety": fix.safety, "patch": fix.config_patch or {}, "env": fix.env or {},
                      "finding": source.to_json()}
    patch = _kept_patch(trail)
    diff = patch_diff(before, after, Path(original).name)
    nxt = attempts.attempt_dir(run_dir, number + 1)
    nxt.mkdir(exist_ok=True)
    nxt.chmod(directory.stat().st_mode & 0o777)
    attempts.write_private(nxt / "fix.diff", diff, file_mode(nxt))
    decision = (f"relaunched as attempt {number + 1} with {source.rule} fix '{fix.title}' ({fix.safety}), "
                + (f"from checkpoint {checkpoint.path} (step {checkpoint.step})" if checkpoint else "from scratch"))
    record["decision"] = decision
    trail["attempts"].append({"attempt": number + 1, "argv": redact_argv(argv), "config": str(out),
                              "fix": {"rule": source.rule, "title": fix.title, "safety": fix.safety,
                                      "config_patch": fix.config_patch, "env": fix.env},
                              "triggered_by": [f.to_json() for f in covered],
                              "resumed_from": checkpoint.to_json() if checkpoint else None,
                              "validated": verdict_text, "diff": diff})
    say(f"attempt {number} exited {code}: {fault.rule} {fault.name}; {decision}")
    return Next(argv, _env_of(trail), patch)


def _choose(source: Finding, trail: dict[str, Any], options: Options, command: list[str],
            directory: Path) -> tuple[Fix, dict, dict, str] | None:
    """The first untried fix DeepSpeed accepts and the command can carry: (fix, patched config, original config,
    verdict), or None.

    DeepSpeed judges the config it was given: the first attempt's (its ``run_start``: the user's config, where a
    Hugging Face Trainer has filled the "auto" values DeepSpeed's parser cannot read), patched as the file is. A
    later attempt's holds the fix on trial, which a next fix does not keep."""
    before = _original_config(trail, command, options)
    first = attempts.attempt_dir(directory.parent, 1)
    given = next((s["config"] for s in _run_starts(first) if isinstance(s.get("config"), dict)), before)
    for fix in options.policy.remedies(source):
        key = fix_key(source.rule, fix)
        if key in trail["tried"]:
            continue
        trail["tried"].append(key)
        patches = [*(kept["patch"] for kept in trail["kept"]), fix.config_patch or {}]
        after, checked = before, given
        for patch in patches:
            after, checked = merge_patch(after, patch), merge_patch(checked, patch)
        verdict = deepspeed_validate.validate(checked, _world_size(directory))
        if verdict is not None and not verdict.accepted:
            say(f"{source.rule} fix '{fix.title}' not launched: {verdict.sentence('the patched config')}")
            continue
        try:  # the command as it would be relaunched: a Trainer must be able to say the patched values too
            relaunch_argv(command, options.config_arg, Path(), None, None, (before, after))
        except RelaunchError as exc:
            say(f"{source.rule} fix '{fix.title}' not launched: {exc}")
            continue
        return fix, after, before, verdict.sentence("the patched config") if verdict else "not validated: no DeepSpeed"
    return None


def _original_config(trail: dict[str, Any], command: list[str], options: Options) -> dict[str, Any]:
    """The config the command passes, as the user wrote it (relative to where the run was started)."""
    _, _, path = config_argument(command, options.config_arg)
    return json.loads((Path(trail["cwd"]) / path).read_text())


def _fault_step(fault: Finding, record: dict[str, Any]) -> int:
    """The finding's first step; unknown, the first step of the attempt: only a checkpoint from before the
    attempt began is then known to predate the fault (an fp16 collapse with no calibrated start, say)."""
    if fault.steps and fault.steps[0] is not None:
        return fault.steps[0]
    return (record.get("resumed_from") or {}).get("step", 0) + 1


def _wanted(finding: Finding, trail: dict[str, Any], options: Options) -> bool:
    """Worth stopping a running attempt for: covered, and a fix left for it (or the fault on trial is back)."""
    trial = trail["trial"]
    back = trial is not None and (finding.rule == trial["rule"] or finding.category == trial["category"])
    return options.policy.covers(finding) and (back or _untried(finding, trail, options))


def _untried(finding: Finding, trail: dict[str, Any], options: Options) -> bool:
    return any(fix_key(finding.rule, fix) not in trail["tried"] for fix in options.policy.remedies(finding))


def _kept_patch(trail: dict[str, Any]) -> dict[str, Any]:
    """Every patch in force: those that helped, then the one on trial (what the probe keeps across the load)."""
    patch: dict[str, Any] = {}
    for fix in [*trail["kept"], *([trail["trial"]] if trail["trial"] else [])]:
        patch = merge_patch(patch, fix["patch"])
    return patch


def _env_of(trail: dict[str, Any]) -> dict[str, str]:
    env: dict[str, str] = {}
    for fix in [*trail["kept"], *([trail["trial"]] if trail["trial"] else [])]:
        env.update(fix["env"])
    return env


def _write_patched(original: Path, before: dict, after: dict, run_id: str, number: int, run_dir: Path) -> Path:
    """The patched config next to the original (never over it), else in the attempt's directory."""
    from zerodoctor.fixes.apply import FixResult, write_config

    result = FixResult(before=before, after=after)
    name = f"{original.stem}.{run_id}.attempt-{number}{original.suffix or '.json'}"
    for out in (original.parent / name, attempts.attempt_dir(run_dir, number) / name):
        try:
            attempts.attempt_dir(run_dir, number).mkdir(exist_ok=True)
            write_config(result, out, source=original, in_place=False)
            return out
        except OSError as exc:
            say(f"{out}: cannot write the patched config there ({exc.strerror or exc})")
    raise RelaunchError("the patched config could not be written")


def _finding(data: dict[str, Any]) -> Finding:
    names = {f.name for f in fields(Finding)}
    body = {k: v for k, v in data.items() if k in names}
    body["fixes"] = [Fix(**fix) for fix in data.get("fixes", [])]
    return Finding(**body)


def _findings(directory: Path) -> list[Finding]:
    """The attempt's findings, as ``diagnose`` judges its run directory."""
    from zerodoctor.pipeline.diagnose import diagnose
    from zerodoctor.pipeline import rules_from

    return diagnose([directory], rules=rules_from(None)).findings


def _fix_not_in_effect(directory: Path) -> bool:
    for path in rank_event_files(directory):
        with open(path, "rb") as f:
            if any(b'"fix_check"' in line and b'"in_effect":false' in line for line in f):
                return True
    return False


def _world_size(directory: Path) -> int:
    """From the attempt's run_start (DeepSpeed judges batch sizes at a world size); 1 if no rank started."""
    for start in _run_starts(directory):
        world = start.get("world_size")
        if isinstance(world, int) and world > 0:
            return world
    return 1


def _run_starts(directory: Path) -> list[dict[str, Any]]:
    """The first event of each rank file of an attempt: its run_start, when the rank got that far."""
    starts = []
    for path in rank_event_files(directory):
        with open(path, "rb") as f:
            start = load_event(f.readline())
        if start.get("kind") == "run_start":
            starts.append(start)
    return starts


def _ranks_alive(directory: Path) -> list[int]:
    """Pids of this host's ranks of the attempt that still run: a wrapper killed alone leaves its job running."""
    import socket

    host, alive = socket.gethostname(), []
    for start in _run_starts(directory):
        pid = start.get("pid")
        if start.get("host") == host and isinstance(pid, int) and pid > 0 and _running(pid):
            alive.append(pid)
    return alive


def _running(pid: int) -> bool:
    """A process of ours with this pid runs (a zombie, dead but not reaped by its parent, does not)."""
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):  # gone, or the pid is someone else's now
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state not in ("Z", "X")


def _read_json(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}
