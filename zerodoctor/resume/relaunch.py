"""Fix and resume, relaunch: the original command → the same command with the patched config and the resume argument.

The config is found where the job takes it: ``--deepspeed`` (HF Trainer, Accelerate),
``--deepspeed_config`` (DeepSpeed's own argparse helper), or the flag the user names with
``--config-arg``; as ``--flag PATH`` or ``--flag=PATH``. The resume argument is the user's
template (``--resume-arg '--load {dir} --load-tag {tag}'``), split like a shell would and
appended; ``{ckpt}`` is the checkpoint's own directory, ``{dir}`` the directory it was saved
into, ``{tag}`` its tag and ``{step}`` its step.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from zerodoctor.resume.checkpoints import Saved

CONFIG_FLAGS = ("--deepspeed", "--deepspeed_config", "--deepspeed-config")


class RelaunchError(ValueError):
    """The command cannot be relaunched with a fix; the message says why."""


def config_argument(argv: list[str], config_arg: str | None = None) -> tuple[int, str, str]:
    """(index in argv, what precedes the path there: '' or '--flag=', the path) of the first config flag passed."""
    flags = (config_arg,) if config_arg else CONFIG_FLAGS
    for i, arg in enumerate(argv):
        for flag in flags:
            if arg == flag and i + 1 < len(argv):
                return i + 1, "", argv[i + 1]
            if arg.startswith(flag + "="):
                return i, flag + "=", arg[len(flag) + 1:]
    named = config_arg or " / ".join(CONFIG_FLAGS)
    raise RelaunchError(f"the command passes no config with {named}; name the flag that takes it with --config-arg")


def relaunch_argv(argv: list[str], config_arg: str | None, config: Path, resume_arg: str | None,
                  checkpoint: Saved | None) -> list[str]:
    """``argv`` with the patched ``config`` where the original was, and the resume argument for ``checkpoint``."""
    index, prefix, _ = config_argument(argv, config_arg)
    out = list(argv)
    out[index] = prefix + str(config)
    if checkpoint is not None:
        if not resume_arg:
            raise RelaunchError("the command takes no resume argument; give its form with --resume-arg "
                                "(e.g. '--resume_from_checkpoint {ckpt}')")
        values = {"ckpt": checkpoint.path, "dir": checkpoint.dir, "tag": checkpoint.tag, "step": checkpoint.step}
        try:
            out += [part.format(**values) for part in shlex.split(resume_arg)]
        except (KeyError, IndexError, ValueError) as exc:
            raise RelaunchError(f"--resume-arg {resume_arg!r}: {exc}; use {{ckpt}}, {{dir}}, {{tag}}, {{step}}") from None
    return out
