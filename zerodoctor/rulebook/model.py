"""Rules: the YAML rule and phrase formats as strict pydantic models (unknown keys are errors)."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

CATEGORIES = (
    "batch_size", "fp16_overflow", "stage3_comm", "fragmentation_oom", "offload_slow",
    "config", "memory", "hang", "straggler", "data", "other",
)
SEVERITIES = ("info", "warning", "error")
Category = Literal[CATEGORIES]  # type: ignore[valid-type]
Severity = Literal[SEVERITIES]  # type: ignore[valid-type]


# defer_build: a command whose rules come from the cache (rulebook/cache.py) validates none; it only reads them.
class FixSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)

    title: str = Field(description="the remedy in one line; a template (docs/rules.md)")
    safety: Literal["safe", "unsafe"] = Field(description="unsafe when it changes training math (batch, lr, precision)")
    when: str | None = Field(None, description="condition under which this fix is offered")
    config_patch: dict[str, Any] | str | None = Field(
        None, description="JSON merge patch for the DeepSpeed config; a leaf that is one '{EXPR}' takes the "
        "expression's value (a number stays a number); the whole patch may be one '{EXPR}' whose value is the "
        "patch (for patches whose keys depend on the config, e.g. renaming a misspelt key)")
    env: dict[str, str] | None = Field(None, description="environment variables to set (values are templates)")
    action: str | None = Field(None, description="what to change outside the config (a template)")

    @field_validator("config_patch")
    @classmethod
    def _one_field(cls, value: Any) -> Any:
        if isinstance(value, str) and not re.fullmatch(r"\{[^{}]+\}", value):
            raise ValueError("a config_patch string must be exactly one '{EXPR}' whose value is the patch")
        return value


class PhraseSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)

    fields: list[str] = Field(description="the record's fields the text may read, as bare names")
    text: str = Field(description="a template over those fields (no signals) that words one record")

    @field_validator("fields")
    @classmethod
    def _names(cls, value: list[str]) -> list[str]:
        bad = [f for f in value if not f.isidentifier() or f.startswith("_")]
        if bad:
            raise ValueError(f"not a field name: {', '.join(bad)}")
        return value


class RuleSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, defer_build=True)

    code: str = Field(pattern=r"^ZD[1-9]\d{2}$", description="ZD + family digit + two digits")
    name: str = Field(pattern=r"^[a-z0-9]+(-[a-z0-9]+)*$", description="kebab-case name of the problem")
    category: Category
    severity: Severity
    status: Literal["preview", "stable"] = "preview"
    static: bool = Field(False, description="judged from the config alone: 'zerodoctor check' runs it before launch")
    when: str = Field(description="condition over signals")
    requires: list[str] = Field(default_factory=list, description="signals that must be known for the rule to be "
                                "judged: where the condition holds and one is missing, the rule is reported as "
                                "unevaluated, naming it (not 'X >= 0' in the condition)")
    verdict: str | None = Field(None, description="a verdict signal (one with values): the message is the one of "
                                "'messages' named by its value; a value without a message keeps the rule silent")
    fallback: bool = Field(False, description="speak only where no other rule found a warning or an error in the "
                           "run: the crash named when nothing knows more (ZD901 names any fatal exception)")
    hold: int | None = Field(None, alias="for", description="'N steps': the condition must hold N steps in a row")
    message: str | None = Field(None, description="the fault in one line, with numbers: a template (docs/rules.md) "
                                "whose fields outside '[...]' clauses the condition or 'requires' guarantees")
    messages: dict[str, str] | None = Field(None, description="with 'verdict': one flat message per value of the "
                                            "verdict (at most two optional '[...]' clauses, no '[if'/'[else')")
    evidence: list[str] = Field(default_factory=list, description="signals shown besides those in the condition")
    steps: list[str] | None = Field(None, description="two signals giving the first and last step involved")
    ranks: str | None = Field(None, description="signal listing the ranks involved (default: all ranks)")
    fixes: list[FixSpec] = Field(default_factory=list)
    doc: str = Field(description="Markdown: What it does / Why is this bad? / Example / Fix")

    @field_validator("hold", mode="before")
    @classmethod
    def _steps(cls, value: Any) -> Any:
        if isinstance(value, str):
            match = re.fullmatch(r"\s*(\d+)\s+steps?\s*", value)
            if not match:
                raise ValueError("must read 'N steps'")
            return int(match.group(1))
        return value

    @field_validator("steps")
    @classmethod
    def _pair(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and len(value) != 2:
            raise ValueError("must name two signals: [first, last]")
        return value
