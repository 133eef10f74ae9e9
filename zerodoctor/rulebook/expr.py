"""Rules: expression text → checked, evaluable expressions over signal values.

Conditions, template fields and fix values are Python-syntax expressions evaluated by
``simpleeval`` (no ``eval``): it refuses dunder attributes and any function not handed to
it. On top of that, an expression is checked at load against a whitelist of syntax
(comparisons, boolean logic, arithmetic, the functions in ``FUNCTIONS``) and the signal
catalogue, so a bad rule is refused before it ever runs, with every problem named.
Nothing a rule says can make a value huge: no repeating or %-formatting a string or list
(``'x' * 10000000000``), and a power's exponent is a constant up to ``MAX_EXPONENT`` or a
signal (whose size at run time simpleeval caps; an over-large one is a missing value).
"""

from __future__ import annotations

import ast
import math
from typing import Any, Callable

from simpleeval import EvalWithCompoundTypes, IterableTooLong, NumberTooHigh

def patch(paths: dict[str, Any]) -> dict[str, Any]:
    """``{"optimizer.params.lr": 1e-4}`` → ``{"optimizer": {"params": {"lr": 1e-4}}}``: a map of dotted
    config keys (as signals name them) as the JSON merge patch that sets them."""
    out: dict[str, Any] = {}
    for path, value in paths.items():
        *parents, leaf = str(path).split(".")
        node = out
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value
    return out


FUNCTIONS: dict[str, Callable] = {
    "abs": abs, "min": min, "max": max, "len": len, "round": round,
    "ceil": math.ceil, "floor": math.floor, "log2": math.log2, "patch": patch,
}

_ALLOWED_NODES = (
    ast.Expression, ast.BoolOp, ast.And, ast.Or, ast.UnaryOp, ast.Not, ast.USub, ast.UAdd,
    ast.BinOp, ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow, ast.Compare,
    ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.In, ast.NotIn, ast.IfExp,
    ast.Call, ast.Name, ast.Load, ast.Attribute, ast.Constant, ast.List, ast.Tuple,
)

Resolver = Callable[[str], Any]
MAX_EXPONENT = 64


SHOWN = 240  # characters of an expression or template an error quotes: a 2,000-character one is not echoed


def shown(text: str) -> str:
    """``text`` quoted for an error message, cut to ``SHOWN`` characters with its length said."""
    return repr(text) if len(text) <= SHOWN else f"{text[:SHOWN]!r}… ({len(text):,} characters)"


class ExprError(ValueError):
    """A problem in a condition or template; ``code`` is the loader's error code."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class MissingSignal(Exception):
    """Raised during evaluation when an expression needs a signal the run does not have."""

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


class Expression:
    """An expression over signals, parsed and checked once, evaluated many times.

    ``signals`` are all the signals it may read; ``guaranteed`` those it reads whenever it
    comes out true, so a template may print them without a clause around them.
    """

    what = "expression"

    def __init__(self, text: str, known: set[str]) -> None:
        self.text = text
        self._resolve: Resolver = _unset
        self._evaluator: EvalWithCompoundTypes | None = None  # made at the first evaluation: most never run
        try:
            tree = ast.parse(text.strip(), mode="eval")
        except SyntaxError as exc:
            raise ExprError("RL201", f"{self.what} {shown(text.strip())} is not a valid expression: "
                            f"{exc.msg}") from None
        self.signals = _check(tree, known, self.what)
        self._whole = {s for s in self.signals if "." not in s}  # a phrase's record fields: bare names
        self.guaranteed = _read_when_true(tree.body, set(known))
        self._tree: ast.expr | None = tree.body

    def __getstate__(self) -> dict[str, Any]:
        """What the rulebook's cache keeps: the text and what the checks found, not the tree or the evaluator
        (made again at the first evaluation: a kept rulebook reads in a few ms)."""
        return {k: v for k, v in self.__dict__.items() if k not in ("_tree", "_evaluator", "_resolve")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, _tree=None, _evaluator=None, _resolve=_unset)

    def value(self, resolve: Resolver) -> Any:
        """Evaluate with ``resolve(name)`` giving each signal's value (or raising MissingSignal)."""
        if self._evaluator is None:
            self._evaluator = EvalWithCompoundTypes(functions=dict(FUNCTIONS), names=self._name)
        if self._tree is None:
            self._tree = ast.parse(self.text.strip(), mode="eval").body
        self._resolve = resolve
        try:
            return self._evaluator.eval(self.text, previously_parsed=self._tree)
        except (ArithmeticError, TypeError, ValueError, NumberTooHigh, IterableTooLong):
            # 1/0, min() of nothing, a number compared with a name, 2 ** a huge signal: the run lacks a usable value.
            raise MissingSignal(self.signals[0] if self.signals else self.text) from None

    def _name(self, node: ast.Name) -> Any:
        if node.id in FUNCTIONS:
            return FUNCTIONS[node.id]
        if node.id in self._whole:
            return self._resolve(node.id)
        return _Scope(node.id, self._resolve)


class Condition(Expression):
    """A rule's or a fix's ``when``: an expression taken as true or false."""

    what = "condition"

    def evaluate(self, resolve: Resolver) -> bool:
        return bool(self.value(resolve))


def _unset(name: str) -> Any:
    raise MissingSignal(name)


def _signal_name(node: ast.AST) -> str | None:
    """``fp16.overflow_rate`` for the outermost node of a dotted name, else None."""
    if isinstance(node, ast.Attribute) and isinstance(node.value, (ast.Name, ast.Attribute)):
        inner = _signal_name(node.value) if isinstance(node.value, ast.Attribute) else node.value.id
        return f"{inner}.{node.attr}" if inner else None
    return None


def _check(tree: ast.AST, known: set[str], what: str) -> list[str]:
    """Return the signals ``tree`` reads; raise ExprError naming every problem."""
    problems: list[str] = []
    used: list[str] = []
    inner = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    for node in ast.walk(tree):
        if not isinstance(node, _ALLOWED_NODES):
            problems.append(f"'{type(node).__name__}' is not allowed in a {what}")
        elif isinstance(node, ast.Call):
            if not (isinstance(node.func, ast.Name) and node.func.id in FUNCTIONS) or node.keywords:
                problems.append(f"call to '{ast.unparse(node.func)}' is not allowed (only {', '.join(FUNCTIONS)})")
        elif isinstance(node, ast.Attribute) and node.attr.startswith("_"):
            problems.append(f"attribute '{node.attr}' is not allowed")
        elif isinstance(node, ast.BinOp) and (problem := _size_problem(node)):
            problems.append(f"{ast.unparse(node)}: {problem}")
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


def _size_problem(node: ast.BinOp) -> str | None:
    """Why an operation could build a huge value at run time, or None."""
    if isinstance(node.op, (ast.Mult, ast.Mod)) and any(
            isinstance(side, (ast.List, ast.Tuple)) or (isinstance(side, ast.Constant) and isinstance(side.value, str))
            for side in (node.left, node.right)):
        return "repeating or %-formatting a string or list is not allowed"
    if isinstance(node.op, ast.Pow):
        exponent = node.right.operand if isinstance(node.right, ast.UnaryOp) else node.right
        constant = isinstance(exponent, ast.Constant) and isinstance(exponent.value, (int, float))
        if constant and abs(exponent.value) > MAX_EXPONENT:
            return f"an exponent over {MAX_EXPONENT} is not allowed"
        if not constant and _signal_name(exponent) is None:
            return f"an exponent must be a number up to {MAX_EXPONENT} or a signal"
    return None


def _always_read(node: ast.AST, known: set[str]) -> set[str]:
    """Signals evaluated whenever ``node`` is: ``a or b`` always reads ``a``, maybe not ``b``."""
    name = _signal_name(node)
    if name is not None:
        return {name} & known
    if isinstance(node, ast.BoolOp):
        return _always_read(node.values[0], known)
    if isinstance(node, ast.IfExp):
        return _always_read(node.test, known)
    return set().union(*(_always_read(child, known) for child in ast.iter_child_nodes(node)))


def _read_when_true(node: ast.AST, known: set[str]) -> set[str]:
    """Signals certainly read (so present) when ``node`` came out true: every operand of a true ``and``."""
    if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.And):
        return set().union(*(_read_when_true(v, known) for v in node.values))
    return _always_read(node, known)
