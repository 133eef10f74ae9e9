"""Rules: YAML files → checked ``Rule`` objects, or every error at once as ``file:line: CODE: what``.

Each rules directory may hold a ``phrases.yaml`` beside its rule files: templates named once that word one
record of a signal's list (``{EXPR:each:NAME}``), for every rule of every directory.

Error codes: RL100 YAML (a file too large, not regular, with aliases), RL101 unknown key, RL102 missing key,
RL103 bad value,
RL201 condition syntax, RL202 unknown signal, RL203 forbidden construct, RL204 template,
RL205 hold without a per-step signal, RL206 a message field outside a clause that the condition does not
guarantee (it could print a hole), RL207 a verdict that is no verdict signal, or a message for a value it never
takes, RL208 a verdict's message that is not flat (over two optional clauses, nested, or '[if'), or a plain
message with over three clauses, RL301 doc section missing, RL401 duplicate code or phrase name,
RL402 file name does not match code and name, RL403 folder does not match category.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

from pydantic import ValidationError

from zerodoctor import plugins, signals
from zerodoctor.rulebook import cache
from zerodoctor.rulebook.expr import Condition, ExprError
from zerodoctor.rulebook.template import Template
from zerodoctor.rulebook.model import CATEGORIES, FixSpec, PhraseSpec, RuleSpec
from zerodoctor.signals.base import Signal
from zerodoctor.sources.readable import UnreadableFile, open_regular

if TYPE_CHECKING:
    import yaml

MAX_RULE_BYTES = 256 * 1024  # the largest shipped rule is ~5 KiB; a 50 MB one took 109 s and 3.2 GB
PHRASES = "phrases.yaml"
REQUIRED_SECTIONS = ("What it does", "Why is this bad?")
ALL_SECTIONS = (*REQUIRED_SECTIONS, "Example", "Fix")


@dataclass(frozen=True)
class RuleError:
    path: str
    line: int
    code: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.code}: {self.message}"


class RuleLoadError(Exception):
    def __init__(self, errors: list[RuleError]) -> None:
        super().__init__("\n".join(map(str, errors)))
        self.errors = errors


@dataclass(frozen=True)
class CompiledFix:
    spec: Any
    title: Template
    when: Condition | None
    # the fix's fields with every string leaf compiled to a Template (``fill`` evaluates them)
    config_patch: Any = None
    env: Any = None
    action: Any = None


@dataclass(frozen=True)
class Rule:
    spec: RuleSpec
    path: Path
    condition: Condition
    message: Template | None  # the one message, or None where the verdict picks one of ``messages``
    fixes: tuple[CompiledFix, ...]
    signals: dict[str, Signal]  # the catalogue's entries for what the rule reads to fire: where each comes from
    messages: dict[str, Template] = field(default_factory=dict)  # verdict value → its message

    @property
    def code(self) -> str:
        return self.spec.code

    @property
    def requires(self) -> list[str]:
        """Signals that must be known once the condition holds: those named, and the verdict."""
        return list(dict.fromkeys([*self.spec.requires, *([self.spec.verdict] if self.spec.verdict else [])]))

    @property
    def guaranteed(self) -> set[str]:
        """Signals that have a value whenever the rule fires: a message may read them outside any clause."""
        return {*self.condition.guaranteed, *self.requires}

    def guaranteed_for(self, value: str) -> set[str]:
        """What the message for the verdict's ``value`` may read outside a clause: also what that value comes with."""
        verdict = self.signals.get(self.spec.verdict or "")
        return self.guaranteed | set(dict(verdict.guarantees).get(value, ()) if verdict else ())

    def texts(self) -> dict[str, Template]:
        """Every message the rule may print, by the verdict value it words ('message' for the one message)."""
        return {"message": self.message} if self.message is not None else dict(self.messages)


def builtin_rules_dir() -> Path:
    """The rules shipped in the wheel (``zerodoctor/rules``), or ``rules/`` of a source checkout."""
    packaged = Path(str(resources.files("zerodoctor"))) / "rules"
    return packaged if packaged.is_dir() else Path(__file__).resolve().parents[2] / "rules"


def load_rules(dirs: Iterable[Path], catalog: dict[str, Signal]) -> list[Rule]:
    """Load every ``*.yaml`` under ``dirs``; raise RuleLoadError with all problems found.

    A clean load is kept in the user's cache (``rulebook/cache.py``) under the hash of every file read and
    of the catalogue: the same rules and signals are read back, anything changed is loaded and checked again."""
    dirs = [Path(d) for d in dirs]
    files = _files(dirs)
    entry = None if files is None else cache.key(files, catalog, MAX_RULE_BYTES)
    if entry is not None and (kept := cache.read(entry, catalog)) is not None:
        return kept
    rules = _load_checked(dirs, catalog)
    if entry is not None and _files(dirs) == files and cache.key(files, catalog, MAX_RULE_BYTES) == entry:
        cache.write(entry, rules)  # only what was read under that key: a file edited meanwhile is not kept
    return rules


def _files(dirs: list[Path]) -> list[Path] | None:
    """Every file the loader reads, in its order (each directory's phrases first); None where a directory is
    missing (an error, never kept)."""
    if not all(d.is_dir() for d in dirs):
        return None
    phrases = [d / PHRASES for d in dirs if (d / PHRASES).exists()]
    return [*phrases, *(p for d in dirs for p in _rule_files(d))]


def _rule_files(directory: Path) -> list[Path]:
    return [p for p in sorted(directory.rglob("*.yaml")) if p != directory / PHRASES]


def _load_checked(dirs: list[Path], catalog: dict[str, Signal]) -> list[Rule]:
    rules: list[Rule] = []
    errors: list[RuleError] = []
    seen: dict[str, str] = {}
    phrases: dict[str, Template] = {}
    for directory in dirs:
        if not directory.is_dir():
            errors.append(RuleError(str(directory), 0, "RL100", "rules directory does not exist"))
        elif (directory / PHRASES).exists():
            errors += load_phrases(directory / PHRASES, phrases)
    for directory in filter(Path.is_dir, dirs):
        for path in _rule_files(directory):
            rule, file_errors = _load_file(path, catalog, phrases)
            errors += file_errors
            if rule is not None:
                if rule.code in seen:
                    errors.append(RuleError(str(path), 1, "RL401",
                                            f"code {rule.code} is already used by {seen[rule.code]}"))
                else:
                    seen[rule.code] = str(path)
                    rules.append(rule)
    if errors:
        raise RuleLoadError(errors)
    return sorted(rules, key=lambda r: r.code)


def rules_from(extra_dirs: list[Path] | None = None) -> list[Rule]:
    """The core's and plugins' rules (``register_rules``), plus ``extra_dirs``, all checked the same way.

    Here, not in the pipeline, so a command that only reads the rules (``rules list``) loads neither
    the store nor the pipeline."""
    dirs = plugins.collected(plugins.hook().register_rules())
    return load_rules([*dirs, *(extra_dirs or [])], signals.catalog())


def _read(path: Path, what: str) -> tuple[yaml.Node, dict] | RuleError:
    """The file's mapping and its YAML node tree, or why it is none."""
    import yaml  # here, not above: a command whose rules come from the cache reads no YAML

    name = str(path)
    try:
        node, data = _parse(path)
    except (OSError, UnicodeDecodeError) as exc:
        return RuleError(name, 0, "RL100", str(exc) if isinstance(exc, UnreadableFile) else f"cannot read: {exc}")
    except _TooLarge as exc:
        return RuleError(name, 0, "RL100", str(exc))
    except RecursionError:
        return RuleError(name, 0, "RL100", f"nested too deeply to be a {what}")
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        return RuleError(name, mark.line + 1 if mark else 0, "RL100", str(getattr(exc, "problem", exc)))
    if not isinstance(data, dict) or not isinstance(node, yaml.MappingNode):
        return RuleError(name, 1, "RL100", f"a {what} file must be a YAML mapping")
    return node, data


def load_phrases(path: Path, phrases: dict[str, Template]) -> list[RuleError]:
    """Add the file's phrases to ``phrases``, in file order (a phrase may use those before it)."""
    read = _read(path, "phrases")
    if isinstance(read, RuleError):
        return [read]
    node, data = read
    errors: list[RuleError] = []

    def err(loc: tuple, code: str, message: str) -> None:
        errors.append(RuleError(str(path), _line(node, loc), code, message))

    for key, entry in data.items():
        try:
            spec = PhraseSpec.model_validate(entry)
        except ValidationError as exc:
            _validation_errors(exc, err, PhraseSpec, (key,))
            continue
        if key in phrases:
            err((key,), "RL401", f"phrase '{key}' is already defined")
            continue
        phrase = _compile(lambda: Template(spec.text, set(spec.fields), phrases), (key, "text"), err)
        if phrase is not None:
            phrases[key] = phrase
    return errors


def _load_file(path: Path, catalog: dict[str, Signal], phrases: dict[str, Template]) -> tuple[
        Rule | None, list[RuleError]]:
    name = str(path)
    read = _read(path, "rule")
    if isinstance(read, RuleError):
        return None, [read]
    node, data = read
    errors: list[RuleError] = []

    def err(loc: tuple, code: str, message: str) -> None:
        errors.append(RuleError(name, _line(node, loc), code, message))

    try:
        spec = RuleSpec.model_validate(data)
    except ValidationError as exc:
        _validation_errors(exc, err, RuleSpec)
        # Conditions and templates are still checked, so one pass reports everything.
        spec = None

    known = set(catalog)
    condition = _compile(lambda: Condition(data.get("when", ""), known), ("when",), err) if isinstance(
        data.get("when"), str) else None
    requires = [s for s in data["requires"] if isinstance(s, str)] if isinstance(data.get("requires"), list) else []
    for i, sig in enumerate(requires):
        if sig not in known:
            err(("requires", i), "RL202", f"unknown signal '{sig}'")
    texts = _messages(data, catalog, phrases, err)
    if condition and texts is not None:
        guaranteed = {*condition.guaranteed, *requires, data.get("verdict")}
        named = data.get("verdict")
        comes_with = dict(catalog[named].guarantees) if isinstance(named, str) and named in catalog else {}
        for key, text in texts.items():
            holes = [s for s in text.required if s not in guaranteed and s not in comes_with.get(key, ())]
            if holes:
                err((key,) if key == "message" else ("messages", key), "RL206", f"{', '.join(holes)} may be missing "
                    "when the rule fires: put the field in an optional '[...]' clause, or name it in 'requires'")
    if condition and data.get("for") is not None and not any(catalog[s].per_step for s in condition.signals):
        err(("for",), "RL205", "'for' needs a condition over a per-step signal (" + ", ".join(
            s.name for s in catalog.values() if s.per_step) + ")")
    for key in ("evidence", "steps", "ranks"):
        value = data.get(key)
        for i, sig in enumerate([value] if isinstance(value, str) else value or []):
            if isinstance(sig, str) and sig not in known:
                err((key, i) if not isinstance(value, str) else (key,), "RL202", f"unknown signal '{sig}'")
    fixes = []
    for i, fix in enumerate(data.get("fixes") or []):
        if not isinstance(fix, dict):
            continue
        title = _compile(lambda: Template(str(fix.get("title", "")), known, phrases), ("fixes", i, "title"), err)
        when = _compile(lambda: Condition(fix["when"], known), ("fixes", i, "when"), err) if isinstance(
            fix.get("when"), str) else None
        fields = {key: _compile(lambda: _templates(fix.get(key), known, phrases), ("fixes", i, key), err)
                  for key in ("config_patch", "env", "action")}
        fixes.append((title, when, fields))
    _check_doc(data.get("doc"), err)
    _check_location(path, data, err)

    if errors or spec is None or condition is None or texts is None:
        return None, errors
    compiled = tuple(CompiledFix(s, t, w, **f) for s, (t, w, f) in zip(spec.fixes, fixes))
    reads = dict.fromkeys([*condition.signals, *spec.requires, *([spec.verdict] if spec.verdict else [])])
    message = texts.get("message") if spec.verdict is None else None
    return Rule(spec, path, condition, message, compiled, {s: catalog[s] for s in reads},
                {} if spec.verdict is None else texts), []


def _messages(data: dict, catalog: dict[str, Signal], phrases: dict[str, Template], err) -> dict[  # noqa: ANN001
        str, Template] | None:
    """The rule's message as ``{"message": …}``, or its verdict's messages by value; None where one is wrong."""
    known = set(catalog)
    message, messages, verdict = data.get("message"), data.get("messages"), data.get("verdict")
    if message is not None and messages is not None:
        err(("messages",), "RL103", "give 'message' (one outcome) or 'verdict' with 'messages', not both")
        return None
    if message is None and messages is None:
        err((), "RL102", "missing key 'message' (or 'verdict' with 'messages')")
        return None
    if message is not None:
        if verdict is not None:
            err(("verdict",), "RL102", "missing key 'messages': a verdict picks one of them by its value")
        if not isinstance(message, str):
            return None
        text = _compile(lambda: Template(message, known, phrases), ("message",), err)
        crowded = text.crowded() if text is not None else None
        if crowded:
            err(("message",), "RL208", f"the message is not flat: {crowded}")
        return None if text is None or verdict is not None else {"message": text}
    if verdict is None:
        err(("messages",), "RL102", "missing key 'verdict': the signal whose value picks the message")
        return None
    if not isinstance(verdict, str) or not isinstance(messages, dict):
        return None  # the model's own error (RL103) says what the value should be
    outcomes = catalog[verdict].values if verdict in catalog else ()
    if verdict not in catalog:
        err(("verdict",), "RL202", f"unknown signal '{verdict}'")
    elif not outcomes:
        err(("verdict",), "RL207", f"'{verdict}' is no verdict: a verdict signal names the values it takes "
            "(signals.base.verdict)")
    texts: dict[str, Template] = {}
    for key, text in messages.items():
        if outcomes and key not in outcomes:
            hint = difflib.get_close_matches(str(key), outcomes, n=1)
            err(("messages", key), "RL207", f"'{verdict}' is never '{key}'" + (
                f" (did you mean '{hint[0]}'?)" if hint else f" (it is one of: {', '.join(outcomes)})"))
        if not isinstance(text, str):
            continue
        compiled = _compile(lambda text=text: Template(text, known, phrases), ("messages", key), err)
        for reason in compiled.unflat() if compiled else []:
            err(("messages", key), "RL208", f"the message for '{key}' is not flat: {reason}")
        if compiled is not None:
            texts[str(key)] = compiled
    return texts


class _TooLarge(ValueError):
    pass


def _loader() -> type:
    """libyaml's safe loader where PyYAML has it: reading the ~60 rule files took 0.39 s in pure Python,
    a third of every command's start-up."""
    import yaml

    return getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _refuse_aliases(text: str) -> None:
    """Aliases are refused before anything is built: ten nested ``*a`` lists of ten are a billion
    (``billion laughs``)."""
    import yaml

    for event in yaml.parse(text, Loader=_loader()):
        if isinstance(event, yaml.AliasEvent):
            raise yaml.composer.ComposerError(None, None, f"aliases (*{event.anchor}) are not allowed in rule files",
                                              event.start_mark)


def _parse(path: Path) -> tuple[yaml.Node | None, Any]:
    """The file's YAML node tree and its data, read from a regular file of at most ``MAX_RULE_BYTES``."""
    with open_regular(path) as f:
        raw = f.read(MAX_RULE_BYTES + 1)
    if len(raw) > MAX_RULE_BYTES:
        raise _TooLarge(f"rule file is over the {MAX_RULE_BYTES // 1024} KiB cap for rule files")
    text = raw.decode("utf-8")
    _refuse_aliases(text)
    loader = _loader()(text)
    try:
        node = loader.get_single_node()
        return node, None if node is None else loader.construct_document(node)
    finally:
        loader.dispose()


def _templates(node: Any, known: set[str], phrases: dict[str, Template]) -> Any:
    """A fix's action, env or config patch with each string leaf compiled (each may hold fields)."""
    if isinstance(node, str):
        return Template(node, known, phrases)
    if isinstance(node, dict):
        return {k: _templates(v, known, phrases) for k, v in node.items()}
    if isinstance(node, list):
        return [_templates(v, known, phrases) for v in node]
    return node


def _validation_errors(exc: ValidationError, err, model: type, within: tuple = ()) -> None:  # noqa: ANN001
    """Each of pydantic's errors as RL101 unknown key (with a close match), RL102 missing or RL103 bad value."""
    for e in exc.errors(include_url=False):
        loc = (*within, *e["loc"])
        if e["type"] == "extra_forbidden":
            key = str(loc[-1])
            hint = difflib.get_close_matches(key, _allowed_keys(loc, model), n=1)
            err(loc, "RL101", f"unknown key '{key}'" + (f" (did you mean '{hint[0]}'?)" if hint else ""))
        elif e["type"] == "missing":
            err(loc[:-1], "RL102", f"missing key '{'.'.join(map(str, loc))}'")
        else:
            err(loc, "RL103", f"'{'.'.join(map(str, loc))}': {e['msg']}")


def _compile(build, loc: tuple, err):  # noqa: ANN001, ANN202 - local helper
    try:
        return build()
    except ExprError as exc:
        err(loc, exc.code, str(exc))
        return None


def _check_doc(doc: Any, err) -> None:  # noqa: ANN001
    if not isinstance(doc, str):
        return
    headings = {line.lstrip("#").strip() for line in doc.splitlines() if line.startswith("#")}
    for section in REQUIRED_SECTIONS:
        if section not in headings:
            err(("doc",), "RL301", f"doc has no '## {section}' section")


def _check_location(path: Path, data: dict, err) -> None:  # noqa: ANN001
    code, name, category = data.get("code"), data.get("name"), data.get("category")
    if isinstance(code, str) and isinstance(name, str) and path.stem != f"{code}-{name}":
        err(("code",), "RL402", f"file should be named '{code}-{name}.yaml'")
    if path.parent.name in CATEGORIES and isinstance(category, str) and path.parent.name != category:
        err(("category",), "RL403", f"rule of category '{category}' lives in folder '{path.parent.name}'")


def _allowed_keys(loc: tuple, model: type) -> list[str]:
    model = FixSpec if model is RuleSpec and "fixes" in loc else model
    return [f.alias or n for n, f in model.model_fields.items()]


def _line(node: yaml.Node, loc: tuple) -> int:
    """1-based line of the YAML node at ``loc`` (its key for a mapping entry), best effort."""
    import yaml

    line = node.start_mark.line + 1
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                if key.value == part:
                    line, node = key.start_mark.line + 1, value
                    break
            else:
                return line
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            return line
    return line
