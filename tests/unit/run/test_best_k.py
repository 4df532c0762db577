"""Measuring the speedup model's recommendation: which levels, and the checks they add."""

from __future__ import annotations

from speedbench.config import SpecConfig
from speedbench.oracle.recommend import SpeedupCurve, SpeedupModel, StepCostFigures
from speedbench.run.best_k import pending, with_best_k
from speedbench.sweep_summary import SummaryRow, SweepSummary


def _row(config: str, bs: int, tok_s: float, method: str = "none", k: int = 0) -> SummaryRow:
    return SummaryRow(
        config=config, split="q", batch_size=bs, method=method, k=k,
        output_throughput_tok_s=tok_s, per_user_tok_s=tok_s, error_rate=0.0,
        ttft_p50_s=0.1, tpot_p50_s=0.1,
    )  # fmt: skip


FIT = StepCostFigures(fixed_s=0.1, per_sequence_s=0.0, per_token_s=0.001, iterations=10,
                      outliers=0, r2=0.9, sources=["none/q/bs1"])  # fmt: skip


def _curve(drafter: str, bs: int, best: int, recommended: int | None = None) -> SpeedupCurve:
    speedup = {0: 1.0, 2: 1.3, 3: 1.2} if best else {0: 1.0, 2: 0.9, 3: 0.8}
    return SpeedupCurve(drafter=drafter, split="q", batch_size=bs, questions=11,
                        speedup=speedup, best_k=best,
                        recommended_k=best if recommended is None else recommended)  # fmt: skip


def test_the_best_k_is_measured_where_the_grid_did_not_and_gets_a_check():
    model = SpeedupModel(target=FIT, curves=[
        _curve("draft_model", 1, 2), _curve("draft_model", 4, 2), _curve("draft_model", 16, 0),
        _curve("ngram", 1, 3),  # the grid's own k: nothing to measure
        _curve("ngram", 4, 2, recommended=3),  # best, but within MIN_CHANGE of the grid's k
    ])  # fmt: skip
    # k=2 at bs 1 and 4 in one launch; SD off needs no level; k=3 was measured.
    assert pending(model, [3]) == {("draft_model", 2): {"q": [1, 4]}}
    summary = SweepSummary(levels=[_row("none", 1, 10.0), _row("none", 4, 30.0)])
    grid = SpecConfig(method="draft_model", num_speculative_tokens=3, draft_model="/d")
    asked = []

    def measure(spec: SpecConfig, split: str, sizes):
        asked.append((spec, split, list(sizes)))
        rows = [
            _row("draft_model-k2", bs, tok, "draft_model", 2) for bs, tok in ((1, 13.5), (4, 36.0))
        ]
        return SweepSummary(levels=rows)

    done, checked = with_best_k(summary, model, [], [SpecConfig(), grid], [3], measure)
    # The grid's draft weights, the recommended k, the batch sizes where it is best.
    assert asked == [(grid.model_copy(update={"num_speculative_tokens": 2}), "q", [1, 4])]
    speedups = {(r.config, r.batch_size): r.speedup for r in done.levels}
    assert speedups[("draft_model-k2", 1)] == 1.35 and speedups[("draft_model-k2", 4)] == 1.2
    # Each measured after the model was made: its prediction (the curve's) beside it.
    assert [(c.level, c.predicted_speedup, c.measured_speedup) for c in checked.checks] == [
        ("draft_model-k2/q/bs1", 1.3, 1.35),
        ("draft_model-k2/q/bs4", 1.3, 1.2),
    ]
