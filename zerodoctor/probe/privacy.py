"""Probe, privacy: argv and configs → copies with secret values redacted; a run directory's mode → its files'.

What the probe and the wrapper write lands in a shared ``runs/`` and gets pasted into issues:
a ``--hf_token`` on the command line or ``comet.api_key`` in the DeepSpeed config must not.
Secrets are found by pattern, wherever they sit in an argument: the value of a flag, a
``NAME=value`` or a URL query parameter whose name contains token, key, secret, password,
passphrase, auth or credential (also inside a ``bash -c '…'`` string); the password of a URL
(``scheme://user:pw@host``); and values that look like a known token (``ghp_…``, ``hf_…``,
``sk-…``) under any name; the credentials of an HTTP ``Authorization`` header (``-H 'Authorization: Bearer X'``)
and a ``Bearer X`` anywhere; and the short password flags of the database and network clients whose names say
no word above (``-p X`` of mysql and sshpass, ``--pw``, ``--pwd``, ``--pass``), on the command line itself. A
number is kept where only a token or key names it (``--max_new_tokens 128`` is no credential), and redacted under
the other names (``--password 1234``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

REDACTED = "<redacted>"
RUN_DIR_MODE = 0o700  # the run directory; its files get the same bits without execute (0600)
_WORD = r"(?:token|key|passw(?:or)?d|passphrase|secret|credential|auth)"
_SECRET = re.compile(_WORD, re.IGNORECASE)
_NUMBERS_KEPT = re.compile(r"token|key", re.IGNORECASE)  # names whose numeric values are counts and sizes
_STRICT = re.compile(r"passw(?:or)?d|passphrase|secret|credential|auth", re.IGNORECASE)
_ENV_ASSIGNMENT = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=(\S*)")  # ``env HF_TOKEN=... python train.py``; with
# whitespace after it, the argument is a script (``bash -c 'HF_TOKEN=… python …'``): ``scrub`` takes it
# Inside one argument (a ``bash -c`` script, a URL): ``NAME=value`` / ``--flag value`` / ``--flag=value``
# with a secret-shaped name, the value quoted or not; and a URL's ``user:password@``. Only secret-shaped
# names match, so a match never swallows the text a secret sits in (``-c '… --hf_token X'``).
_VALUE = r"""('[^']*'|"[^"]*"|[^\s&;'"]+)"""
_INNER_ASSIGNMENT = re.compile(rf"(?<![\w.-])((?=[A-Za-z_])[\w.-]*{_WORD}[\w.-]*)(=)" + _VALUE, re.IGNORECASE)
_INNER_FLAG = re.compile(rf"(?<![\w-])(--?(?=[A-Za-z])[\w.-]*{_WORD}[\w.-]*)(=|\s+(?!-))" + _VALUE,
                         re.IGNORECASE)  # a next flag is no value
# RFC 9110's Authorization credentials: a scheme and its token, or the token alone; a Bearer token anywhere.
_AUTHORIZATION = re.compile(r"(\bAuthorization\s*[:=]\s*(?:(?:Bearer|Basic|Token|Digest)\s+)?)(\S+)", re.IGNORECASE)
_BEARER = re.compile(r"(\bBearer\s+)([A-Za-z0-9._~+/-]+=*)")
# Password flags whose names hold no word of _WORD; ``-p`` only as an argument of its own (``mkdir -p`` in a script
# is no password), so inside a script only the long ones.
_PASSWORD_FLAGS = frozenset({"-p", "--pw", "--pwd", "--pass", "--passwd"})
_INNER_PASSWORD_FLAG = re.compile(r"(?<![\w-])(--(?:pw|pwd|pass|passwd))(=|\s+(?!-))" + _VALUE)
_URL_PASSWORD = re.compile(r"(\b[A-Za-z][A-Za-z0-9+.-]*://[^\s/:@]*:)([^\s/@]+)(@)")
# Known token formats: GitHub, Hugging Face, OpenAI, Slack, AWS access key ids, GitLab.
_TOKEN = re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_\w{30,}|hf_[A-Za-z0-9]{30,}|sk-[\w-]{20,}"
                    r"|xox[abprs]-[\w-]{10,}|AKIA[0-9A-Z]{16}|glpat-[\w-]{20,})")


def secret_name(name: str) -> bool:
    return bool(_SECRET.search(name))


def _secret_flag(flag: str) -> bool:
    return secret_name(flag) or flag in _PASSWORD_FLAGS


def redact_argv(argv: list[str]) -> list[str]:
    """``--hf_token X``, ``--api-key=X``, ``HF_TOKEN=X`` with X replaced, and every argument scrubbed (``scrub``)."""
    out: list[str] = []
    secret_next: str | None = None  # the flag whose value comes next
    for arg in argv:
        if secret_next is not None and not arg.startswith("--"):
            out.append(_redacted(arg, secret_next))
            secret_next = None
            continue
        secret_next = None
        if arg.startswith("-"):
            flag, eq, value = arg.partition("=")
            if _secret_flag(flag):
                if eq:
                    arg = f"{flag}={_redacted(value, flag)}"
                else:
                    secret_next = flag
        elif (match := _ENV_ASSIGNMENT.fullmatch(arg)) and secret_name(match[1]):
            arg = f"{match[1]}={_redacted(match[2], match[1])}"
        out.append(scrub(arg))
    return out


def redact_config(value: Any, key: str = "") -> Any:
    """A copy of a config (any nesting) with the string values of secret-shaped keys replaced, the rest scrubbed."""
    if isinstance(value, dict):
        return {k: redact_config(v, str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [redact_config(v, key) for v in value]
    if isinstance(value, str):
        return _redacted(value, key) if secret_name(key) else scrub(value)
    return value


def scrub(text: str) -> str:
    """``text`` with the secrets inside it replaced: known token formats, a URL's password, and the value of
    each secret-shaped ``NAME=value`` or ``--flag value`` in it (a shell script passed as one argument)."""
    if "uth" in text or "earer" in text:  # before NAME=value, which would take the scheme for the secret
        text = _AUTHORIZATION.sub(lambda m: m[1] + REDACTED, text)
        text = _BEARER.sub(lambda m: m[1] + REDACTED, text)
    if "=" in text or "-" in text:
        text = _INNER_ASSIGNMENT.sub(_inner, text)
        text = _INNER_FLAG.sub(_inner, text)
        text = _INNER_PASSWORD_FLAG.sub(lambda m: f"{m[1]}{m[2]}{REDACTED}", text)
    if "://" in text:
        text = _URL_PASSWORD.sub(lambda m: m[1] + REDACTED + m[3], text)
    return _TOKEN.sub(REDACTED, text)


def _inner(match: re.Match) -> str:
    name, between, value = match[1], match[2], match[3]
    quote = value[0] if value[:1] in ("'", '"') and value[-1:] == value[:1] and len(value) > 1 else ""
    bare = value[1:-1] if quote else value
    return f"{name}{between}{quote}{_redacted(bare, name)}{quote}"


def _redacted(value: str, name: str) -> str:
    """``value`` of the secret-shaped ``name``: replaced, unless a number where the name only says token or key."""
    if not value:
        return value
    if _NUMBERS_KEPT.search(name) and not _STRICT.search(name):
        try:
            float(value)
        except ValueError:
            return REDACTED
        return value
    return REDACTED


def file_mode(run_dir: Path | str) -> int:
    """The mode for files in ``run_dir``: its own permission bits without execute (0700 → 0600, 0750 → 0640)."""
    return Path(run_dir).stat().st_mode & 0o666
