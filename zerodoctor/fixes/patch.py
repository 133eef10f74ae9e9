"""Fixes: JSON merge patches (RFC 7386) applied to a DeepSpeed config, and shown as a diff.

Merge patches are what a person would write by hand: the keys to change, ``null`` to
delete one. Key order of the original is kept so the diff shows only what changed.
"""

from __future__ import annotations

import copy
import difflib
import json
from typing import Any


def merge_patch(target: Any, patch: Any) -> Any:
    """Return ``target`` with ``patch`` applied per RFC 7386; neither argument is modified."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def patch_diff(before: dict[str, Any], after: dict[str, Any], name: str = "ds_config.json") -> str:
    """Unified diff of two configs as indented JSON, labelled a/ and b/ like git."""
    lines_before = json.dumps(before, indent=2).splitlines(keepends=True)
    lines_after = json.dumps(after, indent=2).splitlines(keepends=True)
    return "".join(difflib.unified_diff(lines_before, lines_after, f"a/{name}", f"b/{name}", n=1))


def describe_patch(patch: dict[str, Any], prefix: str = "") -> list[str]:
    """Flatten a patch into ``path = value`` lines (``path: delete`` for nulls), for when no config is at hand."""
    lines: list[str] = []
    for key, value in patch.items():
        path = f"{prefix}.{key}" if prefix else key
        if isinstance(value, dict):
            lines += describe_patch(value, path)
        elif value is None:
            lines.append(f"- {path}")
        else:
            lines.append(f"+ {path} = {json.dumps(value)}")
    return lines
