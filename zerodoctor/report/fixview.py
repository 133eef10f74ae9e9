"""Report: one fix → the lines that show it (config diff, env, action), shared by text and Markdown."""

from __future__ import annotations

from typing import Any

from zerodoctor.fixes.patch import describe_patch, merge_patch, patch_diff
from zerodoctor.rulebook.finding import Fix


def fix_lines(fix: Fix, config: dict[str, Any] | None) -> list[str]:
    """Diff against the run's config when it is known, else the patch as ``+ key = value`` lines."""
    lines: list[str] = []
    if fix.config_patch:
        if config:
            lines += patch_diff(config, merge_patch(config, fix.config_patch)).splitlines()
        else:
            lines += describe_patch(fix.config_patch)
    for key, value in (fix.env or {}).items():
        lines.append(f"export {key}={value}")
    if fix.action:
        lines.append(fix.action)
    return lines
