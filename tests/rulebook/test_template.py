"""The template language of messages and fixes: fields, formats, optional clauses, and what the loader refuses."""

from __future__ import annotations

import pytest

from zerodoctor.rulebook.expr import ExprError, MissingSignal
from zerodoctor.rulebook.template import Template, fill

KNOWN = {"run.world_size", "run.zero_stage", "fp16.overflow_rate", "memory.oom_requested_bytes",
         "memory.oom_ranks", "config.close_matches", "fp16.hit_min_scale", "memory.reduce_bucket_size"}
VALUES = {"run.world_size": 8, "fp16.overflow_rate": 0.25, "memory.oom_requested_bytes": 1610612736,
          "memory.oom_ranks": [0, 1, 2, 3, 6], "config.close_matches": {"zero_optimisation": "zero_optimization"},
          "fp16.hit_min_scale": False, "memory.reduce_bucket_size": 500_000_000}


def _render(text: str, values: dict | None = None) -> str:
    values = VALUES if values is None else values

    def resolve(name: str):
        if values.get(name) is None:
            raise MissingSignal(name)
        return values[name]
    return Template(text, KNOWN).render(resolve)


def test_fields_are_expressions_with_python_format_specs() -> None:
    assert _render("{fp16.overflow_rate:.0%} on {run.world_size * 2} ranks, {run.world_size != 8}") \
        == "25% on 16 ranks, no"
    assert _render("{fp16.overflow_rate / 3}") == "0.08333"  # a float without a spec: 4 significant digits


def test_bytes_print_as_pytorch_prints_them_and_lists_compress_runs() -> None:
    assert _render("{memory.oom_requested_bytes:bytes}") == "1.50 GiB"
    assert _render("{memory.oom_requested_bytes // 1024:bytes}") == "1.50 MiB"
    assert _render("{memory.oom_ranks:list}") == "0-3, 6"
    assert _render("{config.close_matches:arrows}") == "zero_optimisation → zero_optimization"
    assert _render("{config.close_matches:pairs} {config.close_matches:list}") \
        == "zero_optimisation=zero_optimization zero_optimisation"


def test_counts_ranks_durations_and_large_numbers_read_as_words() -> None:
    """'1 steps', 'rank(s) 0', '0.7327 steps', '-9e-06 s' and '5e+08' are what plain specs printed."""
    assert _render("{run.world_size:n:rank}, {run.world_size - 7:n:rank}, {run.world_size - 7:n:applied step}") \
        == "8 ranks, 1 rank, 1 applied step"
    assert _render("{fp16.overflow_rate * 3:n:step} {fp16.overflow_rate * 4:n:step} {run.world_size * 1000:n:step}") \
        == "less than 1 step 1 step 8,000 steps"
    assert _render("on {memory.oom_ranks:ranks}; on {run.world_size:ranks}") == "on ranks 0-3, 6; on rank 8"
    assert _render("{fp16.overflow_rate - 0.25000900:duration}, {fp16.overflow_rate:duration}, "
                   "{run.world_size * 225:duration}") == "-9 µs, 250 ms, 30 min"
    assert _render("{memory.reduce_bucket_size:large} {memory.reduce_bucket_size // 4:large}") == "500M 125M"
    with pytest.raises(MissingSignal):
        _render("{config.close_matches:n:step}")  # a mapping is no count: a hole, never a made-up number


def test_a_clause_is_left_out_with_a_missing_field_and_leaves_no_stray_space() -> None:
    text = "stage 3 is slow [at {run.zero_stage} ], on {run.world_size} ranks[ ({fp16.overflow_rate:.0%})]"
    assert _render(text) == "stage 3 is slow, on 8 ranks (25%)"
    assert _render(text, {"run.world_size": 8}) == "stage 3 is slow, on 8 ranks"


def test_an_empty_list_counts_as_missing() -> None:
    assert _render("OOM[ on rank(s) {memory.oom_ranks:list}]", {"memory.oom_ranks": []}) == "OOM"


def test_if_and_else_clauses() -> None:
    text = "[if fp16.hit_min_scale: aborted][else: {run.world_size} left][if run.zero_stage == 3: ; stage 3]"
    assert _render(text) == "8 left"
    assert _render(text, {**VALUES, "fp16.hit_min_scale": True, "run.zero_stage": 3}) == "aborted; stage 3"
    # a guard over a missing signal is false, so its else is shown
    assert _render("[if run.zero_stage == 3: three][else: unknown]") == "unknown"


def test_a_field_outside_every_clause_with_no_value_raises() -> None:
    with pytest.raises(MissingSignal):
        _render("stage {run.zero_stage}")


def test_literal_braces_and_brackets() -> None:
    assert _render('{{x}} {"["}deepspeed{"]"}') == "{x} [deepspeed]"


def test_required_and_optional_signals_are_told_apart() -> None:
    template = Template("{run.world_size}[ {fp16.overflow_rate}][if run.zero_stage: x]", KNOWN)
    assert template.required == ["run.world_size"]
    assert template.signals == ["run.world_size", "fp16.overflow_rate", "run.zero_stage"]


@pytest.mark.parametrize("text", [
    "{run.nope}", "{run.world_size:zz}", "[else: x]", "[open", "close]", "{run.world_size", "a } b", "{}",
    "{run.world_size.__class__}", "{run.world_size:{run.zero_stage}}", "[if run.world_size open]",
    "{run.world_size:n:}", "{run.world_size:n:Steps!}",
])
def test_malformed_templates_are_refused_at_load(text: str) -> None:
    with pytest.raises(ExprError) as err:
        Template(text, KNOWN)
    assert err.value.code in ("RL202", "RL203", "RL204")


def test_unix_seconds_print_as_a_utc_time_of_day() -> None:
    assert _render("since {fp16.overflow_rate + 1764579220:utc}") == "since 08:53:40 UTC"


def test_each_words_every_record_with_its_phrase_and_leaves_out_what_a_record_lacks() -> None:
    where = Template("rank {rank}[ in {op}] [if seq > 9: late] ({for_s:.0f} s)", {"rank", "op", "seq", "for_s"})
    stuck = Template("{when.stuck:each:where}", {"when.stuck"}, {"where": where})
    records = [{"rank": 1, "op": "all_reduce", "seq": 50, "for_s": 80.6}, {"rank": 0, "op": None, "seq": 3, "for_s": 2}]

    def resolve(name: str):
        return {"when.stuck": records}[name]
    assert stuck.render(resolve) == "rank 1 in all_reduce late (81 s); rank 0 (2 s)"
    records[:] = [records[0]]
    assert Template("{when.stuck:each:where}", {"when.stuck"}, {"where": where}).render(
        lambda name: records[0]) == "rank 1 in all_reduce late (81 s)"  # one record, not in a list
    # a record without a field its phrase needs outside a clause is a missing value: its clause is left out
    assert Template("stalled[: {when.stuck:each:where}]", {"when.stuck"}, {"where": where}).render(
        lambda name: [{"rank": 1}]) == "stalled"
    with pytest.raises(ExprError) as err:
        Template("{when.stuck:each:nowhere}", {"when.stuck"}, {"where": where})
    assert err.value.code == "RL204" and "unknown phrase 'nowhere'" in str(err.value)
    with pytest.raises(ExprError) as err:
        Template("rank {rnak}", {"rank"})  # a phrase reads only its record's fields
    assert err.value.code == "RL202"


def test_a_patch_leaf_that_is_one_field_keeps_its_type() -> None:
    patch = {"zero_optimization": {"reduce_bucket_size": Template("{memory.reduce_bucket_size // 4}", KNOWN),
                                   "note": Template("{memory.reduce_bucket_size:.0e} now", KNOWN)}}
    resolve = VALUES.__getitem__
    assert fill(patch, resolve) == {"zero_optimization": {"reduce_bucket_size": 125_000_000, "note": "5e+08 now"}}
    assert fill(Template("{fp16.overflow_rate * 1.2e-6}", KNOWN), resolve) == 3e-07  # not rounded to 0
