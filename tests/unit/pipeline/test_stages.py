"""The DVC pipeline's file contract: params sections, metrics files, reference comparison."""

import json

import pytest

from speedbench.config import ConfigError
from speedbench.oracle.recommend import (
    KSchedule,
    SpeedupCheck,
    SpeedupCurve,
    SpeedupModel,
    StepCostFigures,
)
from speedbench.pipeline.stages import (
    acceptance_metrics,
    speedup_metrics,
    stage_sweep,
    throughput_metrics,
    write_stage_metrics,
)
from speedbench.report.oracle import render_speedup
from speedbench.report.text import render
from speedbench.sweep_summary import SweepSummary

PARAMS = {
    "models": {"target": "t", "draft": "d", "dtype": "float32"},
    "measure_qualitative": {
        "methods": ["none", "draft_model"],
        "draft_lengths": [3],
        "batch_sizes": [1, 4],
    },
    "measure_throughput": {"methods": ["none", "ngram"], "draft_lengths": [2]},
}

SUMMARY_JSON = {
    "levels": [
        {
            "config": "none",
            "split": "qualitative",
            "batch_size": 1,
            "output_throughput_tok_s": 5.0,
            "per_user_tok_s": 5.0,
            "error_rate": 0.0,
            "ttft_p50_s": 0.2,
            "tpot_p50_s": 0.2,
        },
        {
            "config": "ngram-k2",
            "split": "qualitative",
            "batch_size": 1,
            "output_throughput_tok_s": 6.0,
            "per_user_tok_s": 6.1,
            "error_rate": 0.0,
            "speedup": 1.2,
            "views": {
                "speed_bench": {
                    "al_request_mean": 1.9,
                    "al_token_weighted": 1.95,
                    "conditional_ar": [0.6, 0.5],
                    "by_category": {
                        "coding": {"al_request_mean": 2.25},
                        "qa": {"al_request_mean": 1.4},
                    },
                },
                "stream": {
                    "al_token_weighted": 2.123456789,
                    "conditional_ar": [0.7, 0.5],
                    "by_category": {
                        "coding": {"al_token_weighted": 2.5},
                        "qa": {"al_token_weighted": 1.5},
                    },
                },
                "counters": {"al_token_weighted": 2.1, "conditional_ar": [0.71, 0.52]},
            },
            "ttft_p50_s": 0.2,
            "tpot_p50_s": 0.16,
        },
    ],
    "failures": [],
}
SUMMARY = SweepSummary.model_validate(SUMMARY_JSON)


def test_stage_sweep_merges_models_and_drops_an_unused_draft():
    q = stage_sweep(PARAMS, "measure_qualitative")
    assert (q.name, q.model, q.draft_model, q.engine.dtype, q.output.out_dir) == (
        "qualitative",
        "t",
        "d",
        "float32",
        "results",
    )
    t = stage_sweep(PARAMS, "measure_throughput")
    assert t.draft_model is None and t.methods == ["none", "ngram"]


def test_a_stage_section_may_name_fields_in_their_sections():
    # The stage's own defaults (dtype from models:, out_dir) give way to the section's, field
    # by field, whether the section names a field flat or in its section.
    nested = {"engine": {"dtype": "bfloat16", "port": 9001}, "load": {"batch_sizes": [2]}}
    params = {"models": {"target": "t", "dtype": "float32"}, "measure_qualitative": nested}
    q = stage_sweep(params, "measure_qualitative", "out")
    assert (q.engine.dtype, q.engine.port, q.load.batch_sizes) == ("bfloat16", 9001, [2])
    assert (q.model, q.output.out_dir, q.name) == ("t", "out", "qualitative")
    flat = {
        **params,
        "measure_qualitative": {"dtype": "bfloat16", "port": 9001, "batch_sizes": [2]},
    }
    assert stage_sweep(flat, "measure_qualitative", "out") == q


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"models": {}}, "params has no 'measure_qualitative' section"),
        ({"measure_qualitative": {"batch_size": [1]}}, "SweepConfig.batch_size: unknown field"),
        ({"measure_qualitative": {"methods": ["none"], "draft_lengths": [2]}}, "draft_lengths [2]"),
    ],
)
def test_bad_stage_params(params, message):
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        stage_sweep(params, "measure_qualitative")


def test_acceptance_and_throughput_metrics():
    acc = acceptance_metrics(SUMMARY)
    assert acc == {
        "ngram-k2/qualitative/bs1": {
            "speed_bench": {
                "al_request_mean": 1.9,
                "al_token_weighted": 1.95,
                "conditional_ar": [0.6, 0.5],
                "by_category": {
                    "coding": {"al_request_mean": 2.25},
                    "qa": {"al_request_mean": 1.4},
                },
            },
            "stream": {
                "al_token_weighted": 2.123457,
                "conditional_ar": [0.7, 0.5],
                "by_category": {
                    "coding": {"al_token_weighted": 2.5},
                    "qa": {"al_token_weighted": 1.5},
                },
            },
            "counters": {"al_token_weighted": 2.1, "conditional_ar": [0.71, 0.52]},
        }
    }
    thr = throughput_metrics(SUMMARY)
    assert thr["none/qualitative/bs1"]["speedup"] is None
    assert thr["ngram-k2/qualitative/bs1"]["speedup"] == 1.2


def test_stage_metrics_files_and_report(tmp_path):
    paths = write_stage_metrics(SUMMARY, tmp_path / "metrics" / "qualitative")
    names = ["acceptance.json", "throughput.json", "conditional_ar.csv", "provenance.json"]
    assert [p.name for p in paths] == [*names, "oracle.json", "speedup_model.json"]
    # Every stage file carries the results schema; no oracle in this sweep: its levels are empty.
    assert json.loads(paths[4].read_text()) == {"levels": {}, "schema_version": 2}
    assert json.loads(paths[5].read_text()) == {"levels": {}, "schema_version": 2}
    assert json.loads(paths[0].read_text())["schema_version"] == 2
    assert json.loads(paths[1].read_text())["levels"]["ngram-k2/qualitative/bs1"]["speedup"] == 1.2
    assert json.loads(paths[3].read_text()) == {"engine_versions": {}, "schema_version": 2}
    assert paths[2].read_text().splitlines() == [
        "config,view,position,conditional_ar",
        "ngram-k2/qualitative/bs1,speed_bench,1,0.6",
        "ngram-k2/qualitative/bs1,speed_bench,2,0.5",
        "ngram-k2/qualitative/bs1,stream,1,0.7",
        "ngram-k2/qualitative/bs1,stream,2,0.5",
        "ngram-k2/qualitative/bs1,counters,1,0.71",
        "ngram-k2/qualitative/bs1,counters,2,0.52",
    ]
    (tmp_path / "qualitative").mkdir()
    (tmp_path / "qualitative" / "summary.json").write_text(SUMMARY.model_dump_json())
    text = render(tmp_path, "mlflow/mlflow.db")
    assert "| category (speed_bench view: Category_AL) | ngram-k2 bs1 |" in text
    assert "| coding | 2.25 |" in text and "| **all** (Average_AL) | **1.90** |" in text
    assert "| ngram-k2 | qualitative | bs1 | 1.90 | 1.95 | 2.12 | - | 2.10 |" in text
    assert "| ngram-k2 | bs1 | speed_bench | 1.95 | 0.600 | 0.500 |" in text
    assert "| ngram-k2 | bs1 | counters | 2.10 | 0.710 | 0.520 |" in text
    assert "| ngram-k2 | qualitative | 1 | 6.00 | 6.10 | 1.20 | 0% |" in text


MODEL = SpeedupModel(
    target=StepCostFigures(fixed_s=0.05, per_sequence_s=0.002, per_token_s=0.0005,
                           iterations=900, outliers=3, r2=0.97, sources=["none/qualitative/bs1"]),
    curves=[SpeedupCurve(drafter="ngram", split="qualitative", batch_size=1, questions=11,
                         speedup={0: 1.0, 2: 1.3, 3: 1.25}, best_k=2,
                         recommended_k=2)],
    checks=[SpeedupCheck(level="ngram-k3/qualitative/bs1", drafter="ngram", split="qualitative",
                         batch_size=1, k=3, measured_speedup=1.2, predicted_speedup=1.25,
                         error=1.25 / 1.2 - 1, old_model_speedup=1.5, old_model_error=0.25)],
    schedules=[KSchedule(drafter="ngram", split="qualitative", ranges=[(1, 4, 2), (5, 16, 0)],
                         speedup={1: 1.3})],
)  # fmt: skip


def test_the_speedup_model_in_its_metrics_file_and_the_report(tmp_path):
    figures = speedup_metrics(MODEL)
    assert figures["levels"] == {
        "ngram-k3/qualitative/bs1": {
            "drafter": "ngram", "batch_size": 1, "k": 3, "measured_speedup": 1.2,
            "predicted_speedup": 1.25, "error": 0.041667, "old_model_speedup": 1.5,
            "old_model_error": 0.25,
        }
    }  # fmt: skip
    assert figures["predicted"] == {
        "ngram/qualitative/bs1": {"k0": 1.0, "k2": 1.3, "k3": 1.25, "best_k": 2, "recommended_k": 2}
    }
    assert figures["schedules"] == {"ngram/qualitative": [[1, 4, 2], [5, 16, 0]]}
    assert figures["step_costs"]["target"]["per_token_s"] == 0.0005
    lines = render_speedup(MODEL)
    target = (
        "| target | 50.00 | 2.00 | 0.50 | 0.0 | 0.00 | 0 | 900 (3) | 0.970 | none/qualitative/bs1 |"
    )
    assert target in lines
    assert "| ngram | qualitative | 3 | 1 | 1.20x | 1.25x | +4.2 % | 1.50x | +25.0 % |" in lines
    assert "| ngram | 1 | 11 | 1.00 | **1.30** | 1.25 | 2 | 2 |" in lines
    assert "- ngram (qualitative): bs 1-4: k=2; bs 5-16: off" in lines
