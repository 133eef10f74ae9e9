"""A fatal line of ProcessGroupNCCL names its rank itself ("[Rank 7]"): where the line's prefix says none (Ray's
"(RayWorkerVllm pid=5304) "), that is the rank (held-out 9's vllm#2682)."""

from __future__ import annotations

from pathlib import Path

from zerodoctor.pipeline import rules_from
from zerodoctor.pipeline.diagnose import diagnose

CORPUS = Path(__file__).resolve().parents[1] / "corpus"


def test_the_watchdog_lines_rank_tag_names_the_rank_behind_a_ray_prefix() -> None:
    report = diagnose([CORPUS / "heldout9-vllm-2682-ray-prefixed-watchdog-cuda-error" / "console.log"],
                      rules=rules_from(), input_format="text")
    found = [f for f in report.findings if f.rule == "ZD908"]
    assert found and found[0].ranks == [7] and "on rank 7" in found[0].message, [f.to_json() for f in found]
