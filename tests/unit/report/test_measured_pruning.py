"""The findings row of a pruned EAGLE-3 head measured against the full one."""

from speedbench.report.findings import measured_pruning_row
from speedbench.sweep_summary import SweepSummary

COMMON = {"error_rate": 0.0, "ttft_p50_s": 0.1, "tpot_p50_s": 0.3, "per_user_tok_s": 1.0,
          "output_throughput_tok_s": 5.0, "split": "qualitative", "batch_size": 4,
          "method": "eagle3", "k": 3}  # fmt: skip


def head(config, al, by_category):
    cats = {c: {"al_request_mean": v} for c, v in by_category.items()}
    view = {"al_request_mean": al, "by_category": cats}
    return COMMON | {"config": config, "views": {"speed_bench": view}}


def test_the_pruned_head_is_judged_by_its_measured_loss_per_category():
    summary = SweepSummary.model_validate({"levels": [
        head("eagle3-full-k3", 2.0, {"coding": 2.4, "multilingual": 2.0, "writing": 1.6}),
        head("eagle3-pruned-32k-k3", 1.9, {"coding": 2.4, "multilingual": 1.6, "writing": 1.52}),
    ]})  # fmt: skip
    row = measured_pruning_row([summary], [])
    assert row is not None
    assert "Average_AL -5.0 %" in row
    assert "most lost: multilingual -20.0 %, writing -5.0 %, coding +0.0 %" in row
    assert row.endswith("| holds: multilingual -20.0 % against -5.0 % |")


def test_no_row_without_a_pruned_and_a_full_head_at_the_same_point():
    full = head("eagle3-full-k3", 2.0, {"coding": 2.4})
    other = head("eagle3-pruned-32k-k3", 1.9, {"coding": 2.4}) | {"batch_size": 1}
    assert (
        measured_pruning_row([SweepSummary.model_validate({"levels": [full, other]})], []) is None
    )
    assert measured_pruning_row([SweepSummary.model_validate({"levels": [full]})], []) is None
