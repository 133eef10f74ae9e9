"""Rules: condition and template text → checked, evaluable objects over signal values.

Conditions are Python-syntax expressions evaluated by ``simpleeval`` (no ``eval``): it
refuses dunder attributes and any function not handed to it. On top of that, a
condition is checked at load against a whitelist of syntax (comparisons, boolean logic,
arithmetic, ``abs``/``min``/``max``) and the signal catalogue, so a bad rule is
refused before it ever runs, with every problem named.
"""

from __future__ import annotations

import ast
import string
from typing import Any, Callable

from simpleeval import EvalWithCompoundTypes

FUNCTIONS: dict[str, Callable] = {"abs": abs, "min": min, "max": max, "len": len}

_ALLOWED_NODES = (
    ast.Module, ast.Expression, ast.Expr, ast.BoolOp, ast.And, ast.Or, ast.UnaryOp, ast.Not, ast.USub, ast.UAdd,
    ast.BinOp, ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Compare,
    ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.In, ast.NotIn, ast.IfExp,
    ast.Call, ast.Name, ast.Load, ast.Attribute, ast.Constant, ast.List, ast.Tuple,
)

Resolver = Callable[[str], Any]


class ExprError(ValueError):
    """A problem in a condition or template; ``code`` is the loader's error code."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class MissingSignal(Exception):
    """Raised during evaluation when a condition needs a signal the run does not have."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


class _Scope:
    """What a dotted prefix (``fp16`` in ``fp16.overflow_rate``) evaluates to."""

    __slots__ = ("_prefix", "_resolve")

    def __init__(self, prefix: str, resolve: Resolver) -> None:
        self._prefix, self._resolve = prefix, resolve

    def __getattr__(self, attr: str) -> Any:
        return self._resolve(f"{self._prefix}.{attr}")


class Condition:
    """A rule condition, parsed and checked once, evaluated many times."""

    def __init__(self, text: str, known: set[str]) -> None:
        self.text = text
        self._resolve: Resolver = _unset
        self._evaluator = EvalWithCompoundTypes(functions=FUNCTIONS, names=self._name)
        try:
            self._tree = self._evaluator.parse(text)
        except SyntaxError as exc:
            raise ExprError("RL201", f"condition is not a valid expression: {exc.msg}") from None
        self.signals = _check(self._tree, known)

    def evaluate(self, resolve: Resolver) -> bool:
        """Evaluate with ``resolve(name)`` giving each signal's value (or raising MissingSignal)."""
        self._resolve = resolve
        return bool(self._evaluator.eval(self.text, previously_parsed=self._tree))

    def _name(self, node: ast.Name) -> Any:
        if node.id in FUNCTIONS:
            return FUNCTIONS[node.id]
        return _Scope(node.id, self._resolve)


def _unset(name: str) -> Any:
    raise MissingSignal(name)


def _check(tree: ast.AST, known: set[str]) -> list[str]:
    """Return the signals ``tree`` reads; raise ExprError naming every problem."""
    problems: list[str] = []
    used: list[str] = []
    inner = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    for node in ast.walk(tree):
        if not isinstance(node, _ALLOWED_NODES):
            problems.append(f"'{type(node).__name__}' is not allowed in a condition")
        elif isinstance(node, ast.Call):
            if not (isinstance(node.func, ast.Name) and node.func.id in FUNCTIONS):
                problems.append(f"call to '{ast.unparse(node.func)}' is not allowed (only {', '.join(FUNCTIONS)})")
        elif isinstance(node, ast.Attribute) and node.attr.startswith("_"):
            problems.append(f"attribute '{node.attr}' is not allowed")
        elif isinstance(node, (ast.Attribute, ast.Name)) and id(node) not in inner:
            name = ast.unparse(node)
            if name in FUNCTIONS:
                continue
            if name not in known:
                problems.append(f"unknown signal '{name}'")
            elif name not in used:
                used.append(name)
    if problems:
        code = "RL202" if all(p.startswith("unknown signal") for p in problems) else "RL203"
        raise ExprError(code, "; ".join(dict.fromkeys(problems)))
    return used


class Template:
    """A message or fix text with ``{signal.name:format}`` fields, checked at load."""

    def __init__(self, text: str, known: set[str]) -> None:
        self.text = text
        try:
            fields = [f for _, f, _, _ in string.Formatter().parse(text) if f is not None]
        except ValueError as exc:
            raise ExprError("RL204", f"template {text!r}: {exc}") from None
        unknown = [f for f in fields if f not in known]
        if unknown:
            raise ExprError("RL204", f"template names unknown signal(s): {', '.join(unknown)}")

    def render(self, resolve: Resolver, *, strict: bool = False) -> str:
        return render(self.text, resolve, strict=strict)


def render(text: str, resolve: Resolver, *, strict: bool = False) -> str:
    """Fill ``{signal:format}`` fields; a signal the run lacks prints as ``n/a``, or raises MissingSignal if ``strict``."""
    return _Formatter(resolve, strict).format(text)


class _Formatter(string.Formatter):
    def __init__(self, resolve: Resolver, strict: bool) -> None:
        self._resolve, self._strict = resolve, strict

    def get_field(self, field_name: str, args: Any, kwargs: Any) -> tuple[Any, str]:
        try:
            return self._resolve(field_name), field_name
        except MissingSignal:
            if self._strict:
                raise
            return _NotAvailable(), field_name


class _NotAvailable:
    def __format__(self, spec: str) -> str:
        return "n/a"
