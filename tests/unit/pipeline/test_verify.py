"""verify-reference's verdicts: exact where the arithmetic is the same, a paired test elsewhere."""

from __future__ import annotations

import json

import pytest

from speedbench.cli import main
from speedbench.pipeline.verify import FigureVerdict, overall, upgrade, verify
from speedbench.provenance import SweepProvenance


def cpu(family: str, **caps: str) -> dict:
    """A host_cpu entry of provenance.json for a CPU of this kernel family."""
    wide = family != "avx2"
    return {"model": f"an {family} CPU", "kernel_family": family, "avx512": wide,
            "bf16": family in ("amx", "avx512_bf16"), "amx": family == "amx", "cores": 2,
            "kernel_caps": caps}  # fmt: skip


FP32_AVX2 = {"dtype": "float32", "engine": "vllm", "host_cpu": cpu("avx2")}
BF16_AMX = {"dtype": "bfloat16", "engine": "vllm", "host_cpu": cpu("amx")}
BF16_AVX512 = {"dtype": "bfloat16", "engine": "vllm", "host_cpu": cpu("avx512_bf16")}


def check(
    reference: dict, fresh: dict, reference_prov: dict, fresh_prov: dict
) -> list[FigureVerdict]:
    """verify() on two provenance.json contents ({}: the file is missing)."""
    ref, new = (
        SweepProvenance.model_validate(p) if p else None for p in (reference_prov, fresh_prov)
    )
    return verify(reference, fresh, ref, new)


def level(als: dict[str, float], category_al: dict[str, float] | None = None) -> dict:
    questions = {q: {"category": q[0], "al": al} for q, al in als.items()}
    mean = sum(als.values()) / len(als)
    return {
        "speed_bench": {
            "al_request_mean": round(mean, 6),
            "by_category": {c: {"al_request_mean": al} for c, al in (category_al or {}).items()},
            "questions": questions,
        },
        "counters": {"al_token_weighted": round(mean + 0.1, 6)},
    }


# Ten questions in categories "a" and "b" (the id's first letter).
BASE = {f"{c}{i}": 2.0 + 0.1 * i for c in "ab" for i in range(5)}


def test_the_same_numbers_are_exact():
    ref = {"ngram-k3/q/bs4": level(BASE)}
    verdicts = check(ref, ref, BF16_AMX, BF16_AVX512)
    assert {v.verdict for v in verdicts} == {"exact"} and overall(verdicts) == "exact"


def test_a_difference_where_exactness_is_promised_is_not_reproduced():
    moved = {**BASE, "a0": 2.5}
    verdicts = check(
        {"ngram-k3/q/bs4": level(BASE)}, {"ngram-k3/q/bs4": level(moved)}, FP32_AVX2, FP32_AVX2
    )
    bad = [v for v in verdicts if v.verdict != "exact"]
    assert bad and all(v.verdict == "not_reproduced" for v in bad)
    assert "exactness is promised here" in bad[0].detail
    assert overall(verdicts) == "not_reproduced"


def test_drift_on_another_cpu_family_within_the_interval_is_reproduced():
    # Two questions flip by a small amount in opposite directions: mean difference ~0.
    drift = {**BASE, "a1": BASE["a1"] + 0.05, "b2": BASE["b2"] - 0.05, "b3": BASE["b3"] + 0.01}
    verdicts = check(
        {"ngram-k3/q/bs4": level(BASE)}, {"ngram-k3/q/bs4": level(drift)}, BF16_AMX, BF16_AVX512
    )
    moved = [v for v in verdicts if v.verdict != "exact"]
    assert moved and {v.verdict for v in moved} == {"reproduced"}
    assert "CPU kernels amx vs avx512_bf16" in moved[0].detail
    assert "paired over 10 questions" in moved[0].detail
    assert overall(verdicts) == "reproduced"


def test_a_figure_moved_outside_its_interval_is_not_reproduced_and_exits_1(tmp_path, capsys):
    shifted = {q: al + 0.4 for q, al in BASE.items()}  # every question gained 0.4
    verdicts = check(
        {"ngram-k3/q/bs4": level(BASE)}, {"ngram-k3/q/bs4": level(shifted)}, BF16_AMX, BF16_AVX512
    )
    assert overall(verdicts) == "not_reproduced"
    al = next(v for v in verdicts if v.figure == "speed_bench.al_request_mean")
    assert al.verdict == "not_reproduced" and "mean difference +0.4000" in al.detail

    for name, acc, prov in (("ref", BASE, BF16_AMX), ("new", shifted, BF16_AVX512)):
        stage = tmp_path / name / "qualitative"
        stage.mkdir(parents=True)
        (stage / "acceptance.json").write_text(json.dumps({"ngram-k3/q/bs4": level(acc)}))
        (stage / "provenance.json").write_text(json.dumps(prov))
    args = ["verify-reference", "--reference", str(tmp_path / "ref")]
    with pytest.raises(SystemExit) as exit_:
        main([*args, "--results", str(tmp_path / "new")])
    assert exit_.value.code == 1
    assert "verdict: not reproduced" in capsys.readouterr().out


def test_bf16_at_batch_size_one_on_the_same_cpu_must_be_exact():
    moved = {**BASE, "a1": BASE["a1"] + 0.05, "b2": BASE["b2"] - 0.03}
    for bs, expected in ((1, "not_reproduced"), (4, "reproduced")):
        key = f"ngram-k3/q/bs{bs}"
        verdicts = check({key: level(BASE)}, {key: level(moved)}, BF16_AMX, BF16_AMX)
        assert overall(verdicts) == expected, bs


def test_a_reference_without_questions_cannot_vouch_for_a_difference():
    legacy = {"ngram-k3/q/bs4": {"al_stream": 1.37, "al_counters": 1.7, "conditional_ar": [0.3]}}
    assert upgrade(legacy) == {
        "ngram-k3/q/bs4": {
            "stream": {"al_token_weighted": 1.37},
            "counters": {"al_token_weighted": 1.7, "conditional_ar": [0.3]},
        }
    }
    fresh = {"ngram-k3/q/bs4": {"stream": {"al_token_weighted": 1.34}}}
    verdicts = check(legacy, fresh, {}, BF16_AVX512)
    assert overall(verdicts) == "not_reproduced"
    (stream,) = [v for v in verdicts if v.figure == "stream.al_token_weighted"]
    assert "no per-question data in the reference" in stream.detail


def test_a_schema_1_reference_is_read_in_todays_shape_with_every_number_kept():
    # Schema 1: levels at the top, one al_by_category per view whose weighting the view implied.
    schema_1 = {
        "ngram-k3/q/bs4": {
            "speed_bench": {"al_request_mean": 2.5, "al_by_category": {"a": 2.25, "b": 2.75}},
            "stream": {"al_token_weighted": 2.4, "al_by_category": {"a": 2.1}},
        }
    }
    today = {
        "ngram-k3/q/bs4": {
            "speed_bench": {
                "al_request_mean": 2.5,
                "by_category": {"a": {"al_request_mean": 2.25}, "b": {"al_request_mean": 2.75}},
            },
            "stream": {"al_token_weighted": 2.4, "by_category": {"a": {"al_token_weighted": 2.1}}},
        }
    }
    assert upgrade(schema_1) == today
    assert upgrade({"schema_version": 2, "levels": today}) == today
    verdicts = check(schema_1, {"schema_version": 2, "levels": today}, FP32_AVX2, FP32_AVX2)
    assert [v.figure for v in verdicts] == [
        "speed_bench.al_request_mean",
        "speed_bench.by_category.a.al_request_mean",
        "speed_bench.by_category.b.al_request_mean",
        "stream.al_token_weighted",
        "stream.by_category.a.al_token_weighted",
    ]
    assert overall(verdicts) == "exact"


EOS_64 = {"max_tokens": 64, "ignore_eos": False, "temperature": 0.0, "max_turns": 1}


def test_another_generation_protocol_is_not_comparable_even_with_equal_figures(tmp_path, capsys):
    forced = {**EOS_64, "ignore_eos": True, "max_tokens": 1024}
    ref_prov, new_prov = {**FP32_AVX2, "protocol": EOS_64}, {**FP32_AVX2, "protocol": forced}
    acceptance = {"ngram-k3/q/bs4": level(BASE)}
    verdicts = check(acceptance, acceptance, ref_prov, new_prov)
    assert [v.verdict for v in verdicts] == ["not_comparable"]
    assert verdicts[0].detail == (
        "generation protocol: max_tokens 64 vs 1024; ignore_eos False vs True"
    )
    assert overall(verdicts) == "not_comparable"
    # The same protocol on both sides is judged figure by figure as before.
    same = check(acceptance, acceptance, ref_prov, {**FP32_AVX2, "protocol": dict(EOS_64)})
    assert overall(same) == "exact"

    for name, prov in (("ref", ref_prov), ("new", new_prov)):
        stage = tmp_path / name / "qualitative"
        stage.mkdir(parents=True)
        (stage / "acceptance.json").write_text(json.dumps(acceptance))
        (stage / "provenance.json").write_text(json.dumps(prov))
    with pytest.raises(SystemExit) as exit_:
        main(
            [
                "verify-reference",
                "--reference",
                str(tmp_path / "ref"),
                "--results",
                str(tmp_path / "new"),
            ]
        )
    assert exit_.value.code == 1
    out = capsys.readouterr().out
    assert "verdict: not comparable" in out and "1 not comparable" in out
    assert "measure with its protocol" in out


def test_a_reference_without_a_recorded_protocol_is_judged_on_its_figures():
    acceptance = {"ngram-k3/q/bs4": level(BASE)}
    verdicts = check(acceptance, acceptance, FP32_AVX2, {**FP32_AVX2, "protocol": EOS_64})
    assert overall(verdicts) == "exact"


# One question per category (c, d, ..., m) and five in "a": the main job's bs-1 shape.
ONE_EACH = {**{f"a{i}": 2.0 + 0.1 * i for i in range(5)}, **{f"{c}0": 2.5 for c in "cdefghijklm"}}


def test_a_category_of_one_question_is_judged_by_its_level():
    # One answer flipped on another CPU family: its category's figure moved, the level did not.
    flipped = {**ONE_EACH, "c0": 2.7, "d0": 2.4}
    key = "draft_model-k3/q/bs1"
    ref = level(ONE_EACH, {"c": 2.5, "d": 2.5, "a": 2.2})
    new = level(flipped, {"c": 2.7, "d": 2.4, "a": 2.2})
    verdicts = check({key: ref}, {key: new}, BF16_AMX, BF16_AVX512)
    by_figure = {v.figure: v for v in verdicts}
    c = by_figure["speed_bench.by_category.c.al_request_mean"]
    assert c.verdict == "reproduced"
    assert "paired over 16 questions" in c.detail
    assert "c alone has too few questions to test" in c.detail
    assert by_figure["speed_bench.by_category.a.al_request_mean"].verdict == "exact"
    assert overall(verdicts) == "reproduced"

    # The same single-question categories fail with their level when the level moved.
    shifted = {q: al + 0.4 for q, al in ONE_EACH.items()}
    moved = level(shifted, {"c": 2.9, "d": 2.9, "a": 2.6})
    verdicts = check({key: ref}, {key: moved}, BF16_AMX, BF16_AVX512)
    c = next(v for v in verdicts if v.figure == "speed_bench.by_category.c.al_request_mean")
    assert c.verdict == "not_reproduced" and "mean difference +0.4000" in c.detail


def test_a_category_of_two_or_more_questions_is_tested_on_its_own():
    # Every question of "a" gained 0.3 (the other 11 did not): "a" fails though the level holds.
    moved = {**ONE_EACH, **{f"a{i}": ONE_EACH[f"a{i}"] + 0.3 for i in range(5)}}
    key = "draft_model-k3/q/bs16"
    verdicts = check(
        {key: level(ONE_EACH, {"a": 2.2})}, {key: level(moved, {"a": 2.5})}, BF16_AMX, BF16_AVX512
    )
    a = next(v for v in verdicts if v.figure == "speed_bench.by_category.a.al_request_mean")
    assert a.verdict == "not_reproduced" and "paired over 5 questions" in a.detail


def test_the_reason_exactness_is_not_promised_names_the_dtype():
    moved = {**BASE, "a1": BASE["a1"] + 0.05, "b2": BASE["b2"] - 0.03}
    gguf = {"dtype": "auto", "engine": "llamacpp", "host_cpu": cpu("avx2")}
    verdicts = check({"ngram-k3/q/bs4": level(BASE)}, {"ngram-k3/q/bs4": level(moved)}, gguf, gguf)
    (al,) = [v for v in verdicts if v.figure == "speed_bench.al_request_mean"]
    assert al.verdict == "reproduced" and al.detail.startswith("dtype auto at batch size > 1; ")


def test_a_kernel_cap_on_the_same_cpu_lifts_the_promise_of_exactness():
    # ONEDNN_MAX_CPU_ISA=AVX runs other GEMM kernels on the same AVX2 CPU: like another family.
    capped = {
        **FP32_AVX2,
        "host_cpu": cpu("avx2", ONEDNN_MAX_CPU_ISA="AVX"),
    }
    drift = {**BASE, "a1": BASE["a1"] + 0.05, "b2": BASE["b2"] - 0.05, "b3": BASE["b3"] + 0.01}
    verdicts = check(
        {"ngram-k3/q/bs4": level(BASE)}, {"ngram-k3/q/bs4": level(drift)}, FP32_AVX2, capped
    )
    moved = [v for v in verdicts if v.verdict != "exact"]
    assert moved and {v.verdict for v in moved} == {"reproduced"}
    assert "kernel caps none vs ONEDNN_MAX_CPU_ISA=AVX" in moved[0].detail


def test_the_same_kernel_cap_on_both_sides_keeps_exactness_promised():
    capped = {
        **FP32_AVX2,
        "host_cpu": cpu("avx2", ONEDNN_MAX_CPU_ISA="AVX"),
    }
    moved = {**BASE, "a0": 2.5}
    verdicts = check(
        {"ngram-k3/q/bs4": level(BASE)}, {"ngram-k3/q/bs4": level(moved)}, capped, capped
    )
    assert overall(verdicts) == "not_reproduced"
    assert "exactness is promised here" in next(v for v in verdicts if v.verdict != "exact").detail


def test_a_one_question_level_that_moved_is_untestable_and_does_not_decide(tmp_path, capsys):
    # The random-control level of the bf16 Xeon run: one question, AL +0.2424. A bootstrap
    # over one value fails any change, so the level is untestable and the verdict rests on the
    # rest: here a real-text level that reproduced.
    drift = {**BASE, "a1": BASE["a1"] + 0.05, "b2": BASE["b2"] - 0.05, "b3": BASE["b3"] + 0.01}
    ref = {"ngram-k3/q/bs4": level(BASE), "ngram-k3/random/bs4": level({"r0": 2.0})}
    new = {"ngram-k3/q/bs4": level(drift), "ngram-k3/random/bs4": level({"r0": 2.2424})}
    verdicts = check(ref, new, BF16_AMX, BF16_AVX512)
    random = [v for v in verdicts if v.level == "ngram-k3/random/bs4" and v.verdict != "exact"]
    assert random and {v.verdict for v in random} == {"untestable"}
    assert "1 question in the level: no paired test" in random[0].detail
    assert overall(verdicts) == "reproduced"
    # Where exactness is promised, the one-question level still must match.
    promised = check(ref, new, FP32_AVX2, FP32_AVX2)
    assert overall(promised) == "not_reproduced"
    # Through the command: exit 0, the untestable figures counted in the tally.
    for root, data in (("ref", ref), ("new", new)):
        stage = tmp_path / root / "measure_qualitative"
        stage.mkdir(parents=True)
        (stage / "acceptance.json").write_text(json.dumps(data))
        (stage / "provenance.json").write_text(
            json.dumps(BF16_AMX if root == "ref" else BF16_AVX512)
        )
    assert main(["verify-reference", "--reference", str(tmp_path / "ref"),
                 "--results", str(tmp_path / "new")]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "verdict: reproduced" in out and " untestable" in out


def test_migrate_results_rewrites_a_schema_1_reference_without_changing_a_number(tmp_path, capsys):
    stage = tmp_path / "ref" / "qualitative"
    stage.mkdir(parents=True)
    schema_1 = {"ngram-k3/q/bs4": {**level(BASE), "stream": {"al_by_category": {"a": 2.1}}}}
    (stage / "acceptance.json").write_text(json.dumps(schema_1))
    (stage / "throughput.json").write_text(json.dumps({"none/q/bs4": {"output_tok_s": 5.0}}))
    (stage / "provenance.json").write_text(json.dumps(FP32_AVX2))
    assert main(["migrate-results", str(tmp_path / "ref")]) == 0
    assert capsys.readouterr().out.endswith(
        "qualitative: acceptance.json, throughput.json, provenance.json\n"
    )
    read = lambda name: json.loads((stage / name).read_text())  # noqa: E731
    assert read("acceptance.json") == {"schema_version": 2, "levels": upgrade(schema_1)}
    assert read("acceptance.json")["levels"]["ngram-k3/q/bs4"]["stream"] == {
        "by_category": {"a": {"al_token_weighted": 2.1}}
    }
    assert read("throughput.json") == {
        "schema_version": 2,
        "levels": {"none/q/bs4": {"output_tok_s": 5.0}},
    }
    assert read("provenance.json") == {**FP32_AVX2, "schema_version": 2}
    # A second run finds nothing to do, and the migrated reference verifies against itself.
    assert main(["migrate-results", str(tmp_path / "ref")]) == 0
    assert capsys.readouterr().out.endswith("qualitative: already current\n")
    assert main(["verify-reference", "--reference", str(tmp_path / "ref"),
                 "--results", str(tmp_path / "ref")]) == 0  # fmt: skip
    assert main(["migrate-results", str(tmp_path / "empty")]) == 2
    empty = tmp_path / "empty"
    assert capsys.readouterr().err == (
        f"speedbench: error: {empty}: no acceptance.json below it, nothing to migrate\n"
    )
    # A results folder of schema 1 reaches the report as one line and exit code 2, no traceback.
    (tmp_path / "old" / "qualitative").mkdir(parents=True)
    (tmp_path / "old" / "qualitative" / "summary.json").write_text('{"levels": []}')
    assert main(["report", "--results", str(tmp_path / "old")]) == 2
    assert "results schema 1, this speedbench reads 2" in capsys.readouterr().err
