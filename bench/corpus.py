"""Per-category precision and recall of diagnose on the public corpus (tests/corpus/), and the cases it gets wrong.

Usage: python bench/corpus.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.corpus.score import score_corpus


def main() -> None:
    score = score_corpus()
    counts = score.counts()
    print(f"{'category':<18} {'cases':>5} {'tp':>4} {'fn':>4} {'fp':>4} {'precision':>9} {'recall':>7}")
    for cat in sorted(counts):
        c = counts[cat]
        p = c["tp"] / (c["tp"] + c["fp"]) if c["tp"] + c["fp"] else float("nan")
        r = c["tp"] / (c["tp"] + c["fn"]) if c["tp"] + c["fn"] else float("nan")
        print(f"{cat:<18} {c['tp'] + c['fn']:>5} {c['tp']:>4} {c['fn']:>4} {c['fp']:>4} {p:>9.2%} {r:>7.2%}")
    t = score.totals()
    negatives = [c for c in score.cases if not c.must]
    print(f"{'overall':<18} {t['tp'] + t['fn']:>5} {t['tp']:>4} {t['fn']:>4} {t['fp']:>4} "
          f"{score.precision:>9.2%} {score.recall:>7.2%}")
    print(f"\n{len(score.cases)} cases ({len(negatives)} negatives); right: {score.right_share:.1%}; "
          f"false errors on negatives: {len(score.false_errors_on_negatives())}")
    _right_by(score, "group", "set")
    _right_by(score, "family", "family (cases that name one)")
    for case in score.cases:
        if not case.right:
            print(f"  WRONG {case.name}: missed {sorted(case.missed) or '-'}, false {sorted(case.false) or '-'}, "
                  f"missed rules {sorted(case.missed_rules) or '-'}")


def _right_by(score, attr: str, title: str) -> None:  # noqa: ANN001 - a tests.corpus.score.Score
    """Cases right per value of ``attr`` (the held-out set's is the honest figure)."""
    rows: dict[str, list[bool]] = {}
    for case in score.cases:
        if getattr(case, attr):
            rows.setdefault(getattr(case, attr), []).append(case.right)
    print(f"\n{title:<28} {'right':>9}")
    for key, right in sorted(rows.items()):
        print(f"{key:<28} {sum(right):>4}/{len(right):<4} {sum(right) / len(right):>6.0%}")


if __name__ == "__main__":
    main()
