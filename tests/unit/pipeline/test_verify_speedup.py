"""verify-reference's speedup verdicts: by interval on one host, through the model elsewhere."""

from __future__ import annotations

import json

import pytest

from speedbench.cli import main
from speedbench.pipeline.verify_speedup import (
    SpeedupVerdict,
    judge_by_interval,
    judge_by_model,
    model_tolerances,
    same_host,
    speedup_tally,
    verify_speedups,
)
from speedbench.provenance import SweepProvenance


def provenance(model: str = "AMD EPYC", family: str = "avx2", dtype: str = "float32", **kw):
    cpu = {"model": model, "kernel_family": family, "avx512": family != "avx2",
           "bf16": False, "amx": False, "cores": 2, "kernel_caps": kw.pop("caps", {})}  # fmt: skip
    versions = kw.pop("versions", {"draft_model-k3": "0.32.0"})
    fields = {"dtype": dtype, "engine": "vllm", "host_cpu": cpu, "engine_versions": versions}
    return SweepProvenance.model_validate({**fields, **kw})


LEVEL = "draft_model-k3/qualitative/bs1"


def thr(speedup: float, low: float | None = None, high: float | None = None) -> dict:
    entry: dict = {"speedup": speedup, "output_tok_s": 7.0}
    if low is not None:
        entry |= {"speedup_low": low, "speedup_high": high, "speedup_paired": speedup}
    return {LEVEL: entry, "none/qualitative/bs1": {"speedup": None, "output_tok_s": 5.0}}


def model(error: float, drafter: str = "draft_model", level: str = LEVEL) -> dict:
    return {"levels": {level: {"drafter": drafter, "error": error, "predicted_speedup": 1.1,
                               "measured_speedup": 1.1 / (1 + error)}}}  # fmt: skip


def test_same_host_is_the_cpu_kernels_cores_dtype_engine_and_release():
    assert same_host(provenance(), provenance()) == (True, "")
    assert same_host(provenance(), provenance(model="Intel Xeon", family="amx")) == (
        False,
        "CPU AMD EPYC vs Intel Xeon; kernels avx2 vs amx",
    )
    assert same_host(provenance(), provenance(dtype="bfloat16")) == (
        False,
        "dtype float32 vs bfloat16",
    )
    assert same_host(provenance(), provenance(versions={"x": "0.33.0"})) == (
        False,
        "engine version",
    )
    assert same_host(provenance(), None) == (False, "a run records no provenance")


def test_intervals_reproduce_when_they_overlap_and_not_when_apart():
    verdict, detail = judge_by_interval((1.20, 1.30), (1.28, 1.36))
    assert verdict == "reproduced"
    assert detail == "95% intervals [1.200, 1.300] and [1.280, 1.360] overlap"
    verdict, detail = judge_by_interval((1.20, 1.30), (1.31, 1.36))
    assert verdict == "not_reproduced" and detail.endswith("do not overlap")


def test_the_model_rule_compares_this_runs_error_with_the_references():
    check = {"predicted_speedup": 1.05, "error": -0.08}
    assert judge_by_model(check, 0.118)[0] == "reproduced"
    verdict, detail = judge_by_model(check, 0.05)
    assert verdict == "not_reproduced"
    assert detail == (
        "this run's speedup model predicts 1.050 without the level's timings, error -8.0%; "
        "its leave-one-out error on the reference was up to 5.0%"
    )


def test_the_tolerance_is_the_largest_error_per_drafter_over_the_stage():
    levels = {
        "draft_model-k3/qualitative/bs1": {"drafter": "draft_model", "error": -0.118},
        "draft_model-k1/qualitative/bs4": {"drafter": "draft_model", "error": 0.02},
        "draft_model-k3/throughput/bs1": {"drafter": "draft_model", "error": 0.01},
        "ngram-k3/qualitative/bs1": {"drafter": "ngram", "error": 0.059},
        "ngram-k1/qualitative/bs4": {"drafter": "ngram", "error": None},
    }
    assert model_tolerances({"levels": levels}) == {"draft_model": 0.118, "ngram": 0.059}


def test_the_committed_default_references_tolerances_are_its_worst_leave_one_out_errors():
    from speedbench import REPO_ROOT

    path = REPO_ROOT / "results" / "reference" / "default" / "qualitative" / "speedup_model.json"
    tolerances = model_tolerances(json.loads(path.read_text()))
    assert tolerances == {"draft_model": pytest.approx(0.11811), "ngram": pytest.approx(0.058819)}


def test_on_the_same_host_with_rounds_the_interval_decides():
    [v] = verify_speedups(
        "qualitative", thr(1.25, 1.2, 1.3), thr(1.10, 1.05, 1.15), model(0.0), model(0.0),
        same_host(provenance(), provenance()),
    )  # fmt: skip
    assert (v.verdict, v.rule) == ("not_reproduced", "interval")
    assert v.line() == (
        "NOT_REPRODUCED qualitative draft_model-k3/qualitative/bs1 speedup: reference 1.250, "
        "measured 1.100 by interval (95% intervals [1.200, 1.300] and [1.050, 1.150] do not "
        "overlap)"
    )


def test_a_slower_host_is_judged_through_the_model_not_called_not_reproduced():
    # The fresh host is slower: its speedup reads 0.9 against the reference's 1.25, intervals
    # far apart; its own step costs predict that 0.9 within 4 %, the reference's model erred
    # up to 11.8 %.
    [v] = verify_speedups(
        "qualitative", thr(1.25, 1.2, 1.3), thr(0.90, 0.88, 0.92), model(-0.118), model(0.04),
        same_host(provenance(), provenance(model="Intel Xeon", family="amx")),
    )  # fmt: skip
    assert (v.verdict, v.rule) == ("reproduced", "model")
    assert v.detail.startswith("another host: CPU AMD EPYC vs Intel Xeon; kernels avx2 vs amx;")


def test_without_rounds_or_a_model_a_speedup_is_untestable():
    [v] = verify_speedups(
        "qualitative", thr(1.25), thr(1.1), {}, {}, same_host(provenance(), provenance())
    )
    assert (v.verdict, v.rule) == ("untestable", "")
    assert v.detail == (
        "no paired interval on both sides, and no speedup-model check of the level to judge it by"
    )


def test_the_tally_counts_each_verdict_by_rule():
    def verdict(kind: str, rule: str) -> SpeedupVerdict:
        return SpeedupVerdict("q", LEVEL, 1.0, 1.0, kind, rule, "")

    verdicts = [
        verdict("reproduced", "interval"),
        verdict("reproduced", "model"),
        verdict("reproduced", "model"),
        verdict("not_reproduced", "interval"),
        verdict("untestable", ""),
    ]
    assert speedup_tally(verdicts) == (
        "speedups: 3 reproduced (1 by interval, 2 by model), "
        "1 not reproduced (1 by interval, 0 by model), 1 untestable"
    )
    assert speedup_tally([]) == "speedups: none to compare"


def test_verify_reference_prints_each_speedup_verdict_and_keeps_the_acceptance_exit_code(
    tmp_path, capsys
):
    acceptance = {LEVEL: {"speed_bench": {"al_request_mean": 2.5}}}
    runs = {
        "ref": (thr(1.25, 1.2, 1.3), provenance()),
        "new": (thr(1.10, 1.05, 1.15), provenance()),
    }
    for name, (throughput, prov) in runs.items():
        stage = tmp_path / name / "qualitative"
        stage.mkdir(parents=True)
        (stage / "acceptance.json").write_text(json.dumps(acceptance))
        (stage / "throughput.json").write_text(json.dumps(throughput))
        (stage / "provenance.json").write_text(prov.model_dump_json())
    main(["verify-reference", "--reference", str(tmp_path / "ref"), "--results",
          str(tmp_path / "new")])  # fmt: skip
    out = capsys.readouterr().out
    assert "acceptance matches the reference exactly (qualitative)" in out
    assert "NOT_REPRODUCED qualitative draft_model-k3/qualitative/bs1 speedup" in out
    assert "speedups: 0 reproduced (0 by interval, 0 by model), 1 not reproduced" in out
