"""A pasted slice of DeepSpeed's config print says no precision unless it holds a precision row (held-out 9); a whole
print still says fp32 (the real runs of tests/report/test_terminal_snapshots.py: "2 ranks, ZeRO-2, fp32")."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import parsed
from zerodoctor.sources.batches import make_parser, read_batches

CORPUS = Path(__file__).resolve().parents[1] / "corpus"


def test_a_slice_without_precision_rows_is_not_called_fp32() -> None:
    # vall-e#58: "Creating fp16 optimizer with dynamic loss scale", then the print's activation_checkpointing_config
    # and aio_config rows only: fp16_enabled is not among them, so the print is no witness of fp32
    batches = list(read_batches(CORPUS / "heldout9-vall-e-58-healthy-engine-init-json-config" / "console.log",
                                make_parser("text", "t")))
    starts = [e for e in parsed(batches) if e["kind"] == "run_start"]
    assert starts and all(e.get("precision") != "fp32" for e in starts), starts

