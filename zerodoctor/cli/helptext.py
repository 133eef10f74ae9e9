"""CLI: the command Typer builds → help a person reads.

Typer 0.29 prints its type names where a metavar goes (``{paths}...``, ``<list[Path]>``,
``<int range>``) and a range's bounds in full (``[1<=x<=9223372036854775807]``, the store's 64-bit
integer, not something anyone picks). Each parameter here gets the metavar a Unix tool prints
(``PATHS...``, ``PATH``, ``N``, ``TEXT``), and a bound that large is left out of the help (the value
is still checked against it). Typer offers no setting for these, so the few methods that print them
are replaced on each parameter's instance, here and nowhere else.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, get_args

HUGE = 2**62  # a bound past this is a storage limit, not a choice

_WORDS = {Path: "PATH", int: "N", float: "X", str: "TEXT"}


def readable(command: Any) -> Any:
    """``command`` (a Typer command or group, and its subcommands) with plain metavars; returned for chaining."""
    for param in getattr(command, "params", []):
        _plain(param)
    for sub in getattr(command, "commands", {}).values():
        readable(sub)
    return command


def _plain(param: Any) -> None:
    if getattr(param, "max", None) is not None and param.max >= HUGE:
        low = param.min
        param._get_number_range_help_str = lambda: f"x>={low}" if low is not None else None
    if param.metavar is not None or getattr(param, "is_flag", False) or param.type_descriptor.is_choice:
        return
    if param.param_type_name == "argument":
        # usage ``diagnose [OPTIONS] PATHS...``, help row ``PATHS...``: no braces, no type after the name
        shown = param.name.upper() + ("..." if param.nargs != 1 else "")
        param.metavar = shown
        param._usage_display_name = lambda: shown if param.required else f"[{shown}]"
        param.display_type_rich = lambda ctx: None
        return
    kind = param.type_descriptor.annotation
    kind = (get_args(kind) or (kind,))[0]  # List[Path] → Path
    param.metavar = _WORDS.get(kind, "TEXT")
