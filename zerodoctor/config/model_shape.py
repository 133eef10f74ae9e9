"""``check --model PATH``: a Hugging Face ``config.json`` → the transformer's shape the activation estimate needs.

Two spellings are read: Llama, Mistral, BERT and most models since (``hidden_size``, ``num_hidden_layers``,
``num_attention_heads``) and GPT-2's (``n_embd``, ``n_layer``, ``n_head``); ``vocab_size`` in both. A file without
one of the three is one error line naming the file and the keys it lacks (exit 2), never a guess.
"""

from __future__ import annotations

import json
from pathlib import Path

from zerodoctor.deepspeed.activations import Shape

_KEYS = {"hidden": ("hidden_size", "n_embd"), "layers": ("num_hidden_layers", "n_layer"),
         "heads": ("num_attention_heads", "n_head")}


def read_shape(path: Path) -> Shape:
    """The shape ``path`` states; a ValueError saying ``file:line:col: what`` for a file that cannot say it."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: cannot read: {exc}") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}:{exc.lineno}:{exc.colno}: not JSON: {exc.msg}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}:1:1: a model config must be a JSON object, not {type(data).__name__}")
    found = {what: next((data[k] for k in keys if _count(data.get(k))), None) for what, keys in _KEYS.items()}
    missing = [" or ".join(keys) for what, keys in _KEYS.items() if found[what] is None]
    if missing:
        raise ValueError(f"{path}: no {', '.join(missing)} (a positive integer): not a transformer config "
                         "this can read")
    vocab = data.get("vocab_size")
    return Shape(found["hidden"], found["layers"], found["heads"], vocab if _count(vocab) else None, str(path))


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0
