"""Fixes: findings + a DeepSpeed config → the patched config, checked by DeepSpeed, written only where asked.

Like ``ruff --fix``: each finding contributes its first fix that carries a config patch and
is allowed (``safe`` by default, ``unsafe`` too with ``--unsafe``). Patches go through the
same ``merge_patch`` that ``diagnose`` shows as a diff, in finding order; a patch touching a
key an earlier one changed is skipped, not merged. The result is parsed by DeepSpeed at
the run's world size and never written when DeepSpeed rejects it.

Nothing is dropped in silence: a fix a config cannot hold (an environment variable such as
``PYTORCH_CUDA_ALLOC_CONF``, often the main remedy, or an action) is listed for the user to do,
a finding's other config fixes are named as alternatives not taken, and a patch the config
already satisfies is "already in the config", never "applied".
"""

from __future__ import annotations

import json
import os
import re
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from zerodoctor.config import deepspeed_validate
from zerodoctor.config.deepspeed_validate import Verdict
from zerodoctor.fixes.patch import merge_patch, patch_diff
from zerodoctor.rulebook.finding import Finding, Fix


class FixError(ValueError):
    """A fix that must not be written; the message says why."""


@dataclass
class FixResult:
    before: dict[str, Any]
    after: dict[str, Any]
    applied: list[tuple[str, Fix]] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    unchanged: list[tuple[str, Fix]] = field(default_factory=list)  # the config already had what the patch sets
    alternatives: list[tuple[str, Fix]] = field(default_factory=list)  # a finding's config fixes after the one taken
    by_hand: list[tuple[str, Fix]] = field(default_factory=list)  # env and action fixes: no config holds them
    verdict: Verdict | None = None
    unvalidated: str = ""  # why ``verdict`` is None

    def diff(self, name: str) -> str:
        return patch_diff(self.before, self.after, name)


def apply_fixes(config: dict[str, Any], findings: list[Finding], *, unsafe: bool = False,
                world_size: int | None = None) -> FixResult:
    """Patch ``config`` with the allowed fixes of ``findings``; validate when ``world_size`` is given."""
    result = FixResult(before=config, after=config)
    owner: dict[tuple[str, ...], str] = {}
    for finding in findings:
        result.by_hand += [(finding.rule, fix) for fix in finding.fixes if not fix.config_patch
                           and (unsafe or fix.safety == "safe") and (fix.env or fix.action)]
        patches = [fix for fix in finding.fixes if fix.config_patch]
        allowed = [fix for fix in patches if unsafe or fix.safety == "safe"]
        if not allowed:
            if patches:
                result.skipped.append((finding.rule, "its config fixes are unsafe (pass --unsafe)"))
            continue
        fix = allowed[0]
        result.alternatives += [(finding.rule, other) for other in allowed[1:]]
        paths = list(patch_paths(fix.config_patch))
        clash = next(((p, q) for p in paths for q in owner if p[:len(q)] == q or q[:len(p)] == p), None)
        if clash:
            result.skipped.append((finding.rule, f"changes {'.'.join(clash[0])}, already changed by {owner[clash[1]]}"))
            continue
        patched = merge_patch(result.after, fix.config_patch)
        if patched == result.after:
            result.unchanged.append((finding.rule, fix))
            continue
        owner.update({p: finding.rule for p in paths})
        result.after = patched
        result.applied.append((finding.rule, fix))
    if world_size is None:
        result.unvalidated = "skipped (--no-deepspeed)"
    else:
        result.verdict = deepspeed_validate.validate(result.after, world_size)
        if result.verdict is None:
            result.unvalidated = "DeepSpeed is not installed"
    return result


def patch_paths(patch: dict[str, Any], prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """Leaf paths a merge patch sets or deletes."""
    for key, value in patch.items():
        if isinstance(value, dict) and value:
            yield from patch_paths(value, (*prefix, key))
        else:
            yield (*prefix, key)


def write_config(result: FixResult, out: Path, *, source: Path, in_place: bool) -> None:
    """Write the patched config to ``out`` atomically, in the source's indentation and key order.

    A symlink is written through (its target is the file patched, the link stays), and an
    existing file keeps its mode and owner: ``--in-place`` changes the content, nothing else.
    """
    if out.resolve() == source.resolve() and not in_place:
        raise FixError(f"{out}: refusing to overwrite the input config (pass --in-place to mean it)")
    if result.verdict is not None and not result.verdict.accepted:
        raise FixError(f"not written: DeepSpeed {result.verdict.version} rejects the patched config at world size "
                       f"{result.verdict.world_size}: {result.verdict.error}")
    text = json.dumps(result.after, indent=_indent(source), ensure_ascii=False) + "\n"
    real = out.resolve()
    try:
        st = real.stat()
    except FileNotFoundError:
        st = None
    if st is not None and (st.st_uid, st.st_gid) != (os.geteuid(), os.getegid()) and os.geteuid() != 0:
        # Only root may give a new file away: keep the owner by rewriting the file itself.
        with open(real, "r+", encoding="utf-8") as handle:
            handle.write(text)
            handle.truncate()
        return
    fd, tmp = tempfile.mkstemp(dir=real.parent, prefix=f".{real.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            os.fchmod(fd, stat.S_IMODE(st.st_mode) if st is not None else 0o666 & ~_umask())
            if st is not None:
                os.fchown(fd, st.st_uid, st.st_gid)
        os.replace(tmp, real)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _indent(source: Path) -> int:
    """The source's indentation when it is pretty-printed (``{`` alone on the first line), else 2."""
    match = re.match(r"\s*\{[ \t]*\n( +)\"", source.read_text(encoding="utf-8"))
    return len(match.group(1)) if match else 2


def summary_lines(result: FixResult, *, written: bool = True) -> list[str]:
    """What was patched in (``written``: into a file), what was not and why, what is left to do by hand, and
    DeepSpeed's verdict: one line each."""
    verb = "applied" if written else "would apply"
    lines = [f"{verb} {rule} ({fix.safety}): {fix.title}" for rule, fix in result.applied]
    lines += [f"already in the config {rule}: {fix.title}" for rule, fix in result.unchanged]
    lines += [f"not applied {rule} ({fix.safety}), an alternative to the fix above (one per finding; edit by "
              f"hand to take it): {fix.title}" for rule, fix in result.alternatives]
    lines += [f"skipped {rule}: {why}" for rule, why in result.skipped]
    for rule, fix in result.by_hand:
        todo = "; ".join([*(f"export {k}={v}" for k, v in (fix.env or {}).items()), *([fix.action] if fix.action
                                                                                       else [])])
        lines.append(f"to do by hand {rule} ({fix.safety}), not a config setting: {fix.title}: {todo}")
    verdict = result.verdict
    if verdict is None:
        lines.append(f"not validated: {result.unvalidated}")
    else:
        lines.append(verdict.sentence("the patched config"))
    return lines
