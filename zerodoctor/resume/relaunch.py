"""Fix and resume, relaunch: the original command → the same command with the patched config and the resume argument.

The config is found where the job takes it: ``--deepspeed`` (HF Trainer, Accelerate),
``--deepspeed_config`` (DeepSpeed's own argparse helper), or the flag the user names with
``--config-arg``; as ``--flag PATH`` or ``--flag=PATH``. The resume argument is the user's
template (``--resume-arg '--load {dir} --load-tag {tag}'``), split like a shell would and
appended; ``{ckpt}`` is the checkpoint's own directory, ``{dir}`` the directory it was saved
into, ``{tag}`` its tag and ``{step}`` its step.

A Hugging Face Trainer script (its config passed by ``--deepspeed PATH``) fills the config's values from
its ``TrainingArguments`` and refuses to start when one it fills differs from its argument ("Please correct
the following DeepSpeed config values that mismatch TrainingArguments values"): a patched lr in the config
alone never runs. Each such value the patch changed goes into the command as the Trainer's argument too.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from zerodoctor.deepspeed.defaults import TRAINER_ARGUMENTS
from zerodoctor.resume.checkpoints import Saved

CONFIG_FLAGS = ("--deepspeed", "--deepspeed_config", "--deepspeed-config")
# TrainingArguments' flag takes the config's path (DeepSpeed's own ``--deepspeed`` is a switch before
# ``--deepspeed_config PATH``).
TRAINER_CONFIG_FLAG = "--deepspeed"
_BOOLEAN_WORDS = {"true", "false", "yes", "no", "1", "0", "t", "f", "y", "n"}  # HfArgumentParser's string_to_bool
_ABSENT = object()


class RelaunchError(ValueError):
    """The command cannot be relaunched with a fix; the message says why."""


def config_argument(argv: list[str], config_arg: str | None = None) -> tuple[int, str, str]:
    """(index in argv, what precedes the path there: '' or '--flag=', the path) of the first config flag passed."""
    flags = (config_arg,) if config_arg else CONFIG_FLAGS
    for i, arg in enumerate(argv):
        for flag in flags:
            if arg == flag and i + 1 < len(argv) and not argv[i + 1].startswith("-"):
                return i + 1, "", argv[i + 1]
            if arg.startswith(flag + "="):
                return i, flag + "=", arg[len(flag) + 1:]
    named = config_arg or " / ".join(CONFIG_FLAGS)
    raise RelaunchError(f"the command passes no config with {named}; name the flag that takes it with --config-arg")


def relaunch_argv(argv: list[str], config_arg: str | None, config: Path, resume_arg: str | None,
                  checkpoint: Saved | None, changed: tuple[dict, dict] = ({}, {})) -> list[str]:
    """``argv`` with the patched ``config`` where the original was, the Trainer's arguments for what the patch
    changed (``changed``: the config before and after it), and the resume argument for ``checkpoint``."""
    index, prefix, _ = config_argument(argv, config_arg)
    out = list(argv)
    out[index] = prefix + str(config)
    flag = argv[index - 1] if not prefix else prefix[:-1]
    if flag == TRAINER_CONFIG_FLAG:
        for name, value in trainer_arguments(*changed).items():
            out = _with_argument(out, name, value)
    if checkpoint is not None:
        if not resume_arg:
            raise RelaunchError("the command takes no resume argument; give its form with --resume-arg "
                                "(e.g. '--resume_from_checkpoint {ckpt}')")
        values = {"ckpt": checkpoint.path, "dir": checkpoint.dir, "tag": checkpoint.tag, "step": checkpoint.step}
        try:
            out += [part.format(**values) for part in shlex.split(resume_arg)]
        except (KeyError, IndexError, ValueError) as exc:
            raise RelaunchError(f"--resume-arg {resume_arg!r}: {exc}; "
                                "use {ckpt}, {dir}, {tag}, {step}") from None
    return out


def trainer_arguments(before: dict, after: dict) -> dict[str, str]:
    """The Trainer's arguments that must say what the patched config says: ``{flag: value}`` for each value it
    matches that the patch changed. Every value the Trainer matches against one of those flags must agree."""
    out: dict[str, str] = {}
    for key, flag in TRAINER_ARGUMENTS.items():
        new = _at(after, key)
        if new not in (_ABSENT, "auto") and new != _at(before, key):
            out.setdefault(flag, _text(new))
    for key, flag in TRAINER_ARGUMENTS.items():
        value = _at(after, key)
        if flag in out and value not in (_ABSENT, "auto") and _text(value) != out[flag]:
            raise RelaunchError(f"the Trainer matches {key} ({_text(value)}) against {flag}, which the patch sets to "
                                f"{out[flag]}: a patch must change them together")
    return out


def _text(value: Any) -> str:
    """A value as the Trainer's argument parser reads it back: floats exactly (repr), booleans as True/False."""
    return repr(value) if isinstance(value, float) else str(value)


def _at(config: dict, dotted: str) -> Any:
    for part in dotted.split("."):
        if not isinstance(config, dict) or part not in config:
            return _ABSENT
        config = config[part]
    return config


def _with_argument(argv: list[str], flag: str, value: str) -> list[str]:
    """``argv`` with ``flag`` given ``value``: where it was (``--flag V``, ``--flag=V``, a boolean switch with or
    without its word), else appended."""
    boolean = value in ("True", "False")
    out: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        i += 1
        if arg != flag and not arg.startswith(flag + "="):
            out.append(arg)
            continue
        if arg == flag and i < len(argv) and (argv[i].lower() in _BOOLEAN_WORDS if boolean
                                             else not argv[i].startswith("--")):
            i += 1  # its value
        if flag not in out:
            out += [flag, value]
    return out if flag in out else [*out, flag, value]
