"""Rules: message and fix templates → checked trees → text, or a typed value for a fix field.

The template language (docs/rules.md):
- ``{EXPR}`` or ``{EXPR:SPEC}``: EXPR is an expression in the condition language, SPEC a Python
  format spec or one of ``bytes`` (PyTorch's units: ``1.50 GiB``), ``list`` (``0, 1, 3``; runs
  of three or more integers as ``4-7``; a mapping's keys), ``pairs`` (a mapping as ``a=1, b=2``) and
  ``arrows`` (a mapping as ``a → b, c → d``); ``list:SPEC`` (and ``pairs:SPEC``…) formats each item with SPEC;
  ``utc`` (unix seconds as ``08:53:40 UTC``); ``ranks`` (``rank 0``, ``ranks 0-3``); ``duration`` (seconds as
  ``42.6 ms``, ``12.5 s``, ``3.2 min``); ``large`` (``500M``, ``7B``); ``n:WORD`` (a count with its word,
  ``1 step``, ``992 steps``: a fraction rounds, never prints as ``0.7327``); ``each:NAME`` (a record, or each record of
  a list, worded by the phrase NAME and joined by ``; ``).
  A float without a spec prints as ``:.4g`` would, a bool as yes/no.
- ``[...]``: an optional clause, left out when a field inside it has no value (the signal is
  missing, or the value is None or an empty list). Clauses nest, at most ``MAX_DEPTH`` deep.
- ``[if EXPR: ...]``: an optional clause shown only when EXPR is true (and left out when it
  reads a missing signal); ``[else: ...]`` right after it is shown when it is not.
- ``{{`` and ``}}``: literal braces; ``{"["}`` and ``{"]"}``: literal brackets (``]]`` closes two clauses).
- Spaces a left-out clause leaves doubled, or before ``, ; : . )``, are dropped.

A verdict's message (a rule's ``messages:``) must be flat: at most ``MAX_CLAUSES`` plain ``[...]``
clauses, none nested, no ``[if``/``[else`` (``Template.unflat`` says why one is not); a one-outcome rule's
``message:`` at most ``MAX_PLAIN_CLAUSES`` (``Template.crowded``).

A phrase (``phrases.yaml`` beside the rules) is a template over one record's fields, named once and
used by every rule that words such records. A field outside every clause must be one the rule's
condition guarantees (the loader checks it), so a message never has a hole. Only the expressions are
parsed as Python (``expr.py``); this module merely finds where fields and clauses begin and end.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass, field
from typing import Any, Union

from zerodoctor.rulebook.expr import Condition, Expression, ExprError, MissingSignal, Resolver, shown
from zerodoctor.messages.units import (format_bytes, format_count, format_int_list, format_large, format_ranks,
                                       format_seconds)

_FORMATS = ("bytes", "utc", "list", "pairs", "arrows", "each", "ranks", "duration", "large", "n")
_PER_ITEM = ("list", "pairs", "arrows")  # these take a spec for each item: list:.0%
_PAIRS = {"(": ")", "[": "]", "{": "}"}
_PUNCT = re.compile(r" +([,;:.)])")
MAX_WIDTH, MAX_PRECISION = 100, 20
MAX_CLAUSES = 2  # optional clauses in a verdict's message: more, and the branching belongs in the signal
MAX_PLAIN_CLAUSES = 3  # in a one-outcome rule's message, nested ones counted: more, and it is a verdict's
MAX_DEPTH = 3  # clauses inside clauses, in any template: the shipped phrases nest three deep; 3,000 broke every run
# Python's format-spec mini-language: [[fill]align][sign][z][#][0][width][grouping][.precision][type]
_SIZES = re.compile(r"(?:.?[<>=^])?[-+ ]?z?#?0?(?P<width>\d*)[,_]?(?:\.(?P<precision>\d+))?[a-zA-Z%]?", re.S)


@dataclass(frozen=True)
class Field:
    expr: Expression
    spec: str
    phrase: Template | None = None  # each:NAME's phrase


@dataclass(frozen=True)
class Clause:
    guard: Condition | None
    parts: list[Part] = field(default_factory=list)
    otherwise: bool = False  # an [else: ...]: shown when the clause before it was not


Part = Union[str, Field, Clause]


class Template:
    """A message, fix title, action or patch value, parsed and checked once."""

    def __init__(self, text: str, known: set[str], phrases: dict[str, Template] | None = None) -> None:
        """``known``: the signals (for a phrase: its record's fields); ``phrases``: those ``each:NAME`` may use."""
        self.text = text
        self.parts = _parse(text, known, phrases or {})

    @property
    def signals(self) -> list[str]:
        """Every signal the template may read, in order of first use."""
        return list(dict.fromkeys(s for expr in _expressions(self.parts, outside=False) for s in expr.signals))

    @property
    def required(self) -> list[str]:
        """Signals read by fields outside every clause: a missing one leaves a hole."""
        return list(dict.fromkeys(s for expr in _expressions(self.parts, outside=True) for s in expr.signals))

    @property
    def single(self) -> Field | None:
        """The field when the template is exactly one ``{EXPR}``: its value keeps its type in a patch."""
        return self.parts[0] if len(self.parts) == 1 and isinstance(self.parts[0], Field) else None

    def unflat(self) -> list[str]:
        """Why this is not a flat sentence (a verdict's message): guarded or nested clauses, or too many."""
        clauses = [p for p in self.parts if isinstance(p, Clause)]
        reasons = []
        if any(c.guard is not None or c.otherwise for c in clauses):
            reasons.append("an '[if ...:' or '[else:' clause (the verdict signal decides; its message only words it)")
        if any(isinstance(p, Clause) for c in clauses for p in c.parts):
            reasons.append("a clause inside a clause")
        if len(clauses) > MAX_CLAUSES:
            reasons.append(f"{len(clauses)} optional clauses (at most {MAX_CLAUSES})")
        return reasons

    def crowded(self) -> str | None:
        """Why a one-outcome message has too many optional clauses (nested ones counted), or None."""
        count = len(_clauses(self.parts))
        if count <= MAX_PLAIN_CLAUSES:
            return None
        return (f"{count} optional clauses (at most {MAX_PLAIN_CLAUSES}: where a clause decides the meaning, the "
                "branching belongs in a verdict signal)")

    def render(self, resolve: Resolver) -> str:
        """The text; raises MissingSignal when a field outside every clause has no value."""
        # a clause left out may leave two spaces where its neighbours met, or one before a comma
        return _PUNCT.sub(r"\1", re.sub(r" {2,}", " ", _render(self.parts, resolve))).strip()


def _clauses(parts: list[Part]) -> list[Clause]:
    return [c for p in parts if isinstance(p, Clause) for c in (p, *_clauses(p.parts))]


def _expressions(parts: list[Part], outside: bool) -> list[Expression]:
    found: list[Expression] = []
    for part in parts:
        if isinstance(part, Field):
            found.append(part.expr)
        elif isinstance(part, Clause) and not outside:
            found += [part.guard] if part.guard else []
            found += _expressions(part.parts, outside)
    return found


def _render(parts: list[Part], resolve: Resolver) -> str:
    out: list[str] = []
    shown = True  # whether the last clause was
    for part in parts:
        if isinstance(part, str):
            out.append(part)
        elif isinstance(part, Field) and part.phrase is not None:
            out.append(_each(value_of(part.expr, resolve), part.phrase))
        elif isinstance(part, Field):
            out.append(format_value(value_of(part.expr, resolve), part.spec))
        elif part.otherwise and shown:
            continue
        else:
            try:
                if part.guard is None or part.guard.evaluate(resolve):
                    out.append(_render(part.parts, resolve))
                    shown = True
                    continue
            except MissingSignal:
                pass
            shown = False
    return "".join(out)


def value_of(expr: Expression, resolve: Resolver) -> Any:
    """The expression's value; None and empty lists count as missing, as a blank in the text would."""
    value = expr.value(resolve)
    if value is None or (isinstance(value, (list, tuple, dict, str)) and not value):
        raise MissingSignal(expr.signals[0] if expr.signals else expr.text)
    return value


def format_value(value: Any, spec: str) -> str:
    spec, _, item = spec.partition(":") if spec.split(":")[0] in _FORMATS else (spec, "", "")
    if spec == "bytes":
        return format_bytes(value)
    if spec in ("ranks", "duration", "large", "n") and not _number_or_ranks(value, spec):
        raise MissingSignal(f"{value!r}:{spec}")
    if spec == "ranks":
        return format_ranks(value)
    if spec == "duration":
        return format_seconds(value)
    if spec == "large":
        return format_large(value)
    if spec == "n":
        return format_count(value, item)
    if spec == "utc":
        return _utc(value)
    if spec == "list":
        return _list(value, item)
    if spec in ("pairs", "arrows"):
        between = "=" if spec == "pairs" else " → "
        return ", ".join(f"{k}{between}{format_value(v, item)}" for k, v in dict(value).items())
    if isinstance(value, bool) and not spec:
        return "yes" if value else "no"
    if isinstance(value, float) and not spec:
        spec = ".4g"
    try:
        return format(value, spec)
    except (TypeError, ValueError):
        raise MissingSignal(f"{value!r}:{spec}") from None


def _number_or_ranks(value: Any, spec: str) -> bool:
    if spec == "ranks" and isinstance(value, (list, tuple)):
        return all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _utc(value: Any) -> str:
    """Unix seconds as ``08:53:40 UTC``: a stall is minutes long, so the time of day says when it began."""
    try:
        if isinstance(value, bool):
            raise TypeError
        return time.strftime("%H:%M:%S UTC", time.gmtime(value))
    except (TypeError, ValueError, OverflowError, OSError):
        raise MissingSignal(f"{value!r}:utc") from None


def _each(value: Any, phrase: Template) -> str:
    """A record, or each record of a list, worded by ``phrase``; raises MissingSignal on anything else."""
    items = [value] if isinstance(value, dict) else value
    if not isinstance(items, (list, tuple)) or not all(isinstance(item, dict) for item in items):
        raise MissingSignal(f"{value!r}:each")

    def fields(item: dict[str, Any]) -> Resolver:
        def resolve(name: str) -> Any:
            if item.get(name) is None:
                raise MissingSignal(name)
            return item[name]
        return resolve
    return "; ".join(phrase.render(fields(item)) for item in items)


def _list(values: Any, spec: str) -> str:
    """``0, 1, 3`` or ``0-3, 7``: consecutive integers of three or more shown as a range."""
    items = list(values)
    if spec or not all(isinstance(v, int) and not isinstance(v, bool) for v in items):
        return ", ".join(format_value(v, spec) for v in items)
    return format_int_list(items)


def _parse(text: str, known: set[str], phrases: dict[str, Template]) -> list[Part]:
    stack: list[list[Part]] = [[]]
    opened: list[tuple[Condition | None, bool]] = []
    literal: list[str] = []
    i = 0

    def flush() -> None:
        if literal:
            stack[-1].append("".join(literal))
            literal.clear()

    while i < len(text):
        char = text[i]
        if char in "{}" and text[i + 1:i + 2] == char:
            literal.append(char)
            i += 2
        elif char == "{":
            flush()
            end = _scan(text, i + 1, "}")
            body = text[i + 1:end]
            colon = _scan(body + ":", 0, ":")  # the spec starts at the first ':' outside brackets and quotes
            expr, spec = body[:colon], body[colon + 1:].strip()
            if not expr.strip():
                raise ExprError("RL204", f"template {shown(text)}: empty field at character {i}")
            if "{" in spec or "}" in spec:
                raise ExprError("RL204", f"template {shown(text)}: nested fields in a format spec are not supported")
            stack[-1].append(_field(expr, spec, known, text, phrases))
            i = end + 1
        elif char == "[":
            if len(opened) >= MAX_DEPTH:
                raise ExprError("RL204", f"template {shown(text)}: clauses nested more than {MAX_DEPTH} deep at "
                                f"character {i}")
            flush()
            guard, otherwise = None, text.startswith("else:", i + 1)
            if text.startswith("if ", i + 1):
                colon = _scan(text, i + 4, ":")
                guard = _compile(Condition, text[i + 4:colon], known, text)
                i = colon + 1
            elif otherwise:
                last = stack[-1][-1] if stack[-1] else None
                if not (isinstance(last, Clause) and last.guard is not None):
                    raise ExprError("RL204", f"template {shown(text)}: '[else:' must follow an '[if ...:' clause "
                                    "directly")
                i += len("[else:")
            else:
                i += 1
            if guard is not None or otherwise:
                i += text[i:i + 1] == " "  # "[if x: text]" reads as "text"
            opened.append((guard, otherwise))
            stack.append([])
        elif char == "]":
            if len(stack) == 1:
                raise ExprError("RL204", f"template {shown(text)}: ']' without its '[' at character {i}")
            flush()
            parts = stack.pop()
            guard, otherwise = opened.pop()
            stack[-1].append(Clause(guard, parts, otherwise))
            i += 1
        elif char == "}":
            raise ExprError("RL204", f"template {shown(text)}: '}}' without its '{{' at character {i} (write '}}}}')")
        else:
            literal.append(char)
            i += 1
    if len(stack) > 1:
        raise ExprError("RL204", f"template {shown(text)}: a '[' clause is never closed")
    flush()
    return stack[0]


def _field(expr: str, spec: str, known: set[str], text: str, phrases: dict[str, Template]) -> Field:
    head, _, item = spec.partition(":")
    if head == "each":
        if item not in phrases:
            raise ExprError("RL204", f"template {shown(text)}: unknown phrase '{item}' in '{spec}' (phrases: "
                            f"{', '.join(phrases) or 'none'})")
        return Field(_compile(Expression, expr, known, text), spec, phrases[item])
    if head == "n":
        if not re.fullmatch(r"[a-z][a-z -]*[a-z]", item):
            raise ExprError("RL204", f"template {shown(text)}: 'n:' takes the word counted, singular ('n:step')")
        return Field(_compile(Expression, expr, known, text), spec)
    checked = item if head in _PER_ITEM else spec  # list:.0% formats each item with .0%
    if checked and checked not in _FORMATS:
        size = _SIZES.fullmatch(checked)  # a message is one line: '>2000000000' would take gigabytes
        if size and size["width"] and int(size["width"]) > MAX_WIDTH:
            raise ExprError("RL204", f"template {shown(text)}: width {size['width']} in '{spec}' is over {MAX_WIDTH}")
        if size and size["precision"] and int(size["precision"]) > MAX_PRECISION:
            raise ExprError("RL204", f"template {shown(text)}: precision {size['precision']} in '{spec}' is over "
                            f"{MAX_PRECISION}")
        try:
            format(1.5, checked)
        except ValueError:
            try:
                format(1, checked)
            except ValueError:
                raise ExprError("RL204", f"template {shown(text)}: unknown format '{spec}' (a Python format spec, "
                                f"or {' / '.join(_FORMATS)})") from None
    return Field(_compile(Expression, expr, known, text), spec)


def _compile(kind: type, expr: str, known: set[str], text: str) -> Any:
    try:
        return kind(expr, known)
    except ExprError as exc:
        raise ExprError(exc.code, f"template {shown(text)}: {exc}") from None


def _scan(text: str, start: int, stop: str) -> int:
    """Index of the first ``stop`` at ``start`` or after, outside brackets and quotes."""
    depth: list[str] = []
    quote = ""
    for i in range(start, len(text)):
        char = text[i]
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == stop and not depth:
            return i
        elif char in _PAIRS:
            depth.append(_PAIRS[char])
        elif depth and char == depth[-1]:
            depth.pop()
    raise ExprError("RL204", f"template {shown(text)}: '{stop}' expected after character {start - 1}")


def plain(value: Any) -> Any:
    """JSON-friendly numbers, in nested dicts and lists too: integral floats → int, others to 6 significant
    digits (an lr of 3e-07 stays 3e-07; rounding to decimals would make it 0)."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        if value.is_integer() and abs(value) < 2**53:
            return int(value)
        return float(f"{value:.6g}")
    return value


def fill(node: Any, resolve: Resolver) -> Any:
    """A fix's compiled patch, env or action → its value; a leaf that is exactly one field keeps its type.

    Raises MissingSignal when a field outside a clause has no value: the caller drops the whole fix
    (in a merge patch a blank would be null, which deletes the key: "lr": null drops the user's lr).
    """
    if isinstance(node, dict):
        return {k: fill(v, resolve) for k, v in node.items()}
    if isinstance(node, list):
        return [fill(v, resolve) for v in node]
    if isinstance(node, Template):
        single = node.single
        if single is not None and not single.spec:
            return plain(value_of(single.expr, resolve))
        return node.render(resolve)
    return node
