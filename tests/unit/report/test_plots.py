from speedbench.report.plots import write_plots
from speedbench.sweep_summary import SweepSummary

COMMON = {"split": "qualitative", "error_rate": 0.0, "ttft_p50_s": 0.1, "tpot_p50_s": 0.3}
LEVELS = {
    "levels": [
        {"config": "none", "batch_size": 1, "output_throughput_tok_s": 3.0, "per_user_tok_s": 3.1},
        {"config": "none", "batch_size": 4, "output_throughput_tok_s": 9.0, "per_user_tok_s": 2.4},
        {
            "config": "draft_model-k3",
            "batch_size": 1,
            "output_throughput_tok_s": 3.3,
            "per_user_tok_s": 3.5,
            "views": {
                "counters": {"conditional_ar": [0.8, 0.7, 0.6]},
                "speed_bench": {
                    "by_category": {
                        "coding": {"al_request_mean": 3.1},
                        "writing": {"al_request_mean": 2.2},
                    }
                },
            },
            "speedup": 1.1,
        },
    ]
}
SUMMARY = SweepSummary.model_validate({"levels": [COMMON | r for r in LEVELS["levels"]]})


def test_plots_are_written_as_png(tmp_path):
    paths = write_plots(SUMMARY, tmp_path)
    assert sorted(p.name for p in paths) == [
        "al_heatmap.png",
        "conditional_ar.png",
        "pareto.png",
        "speedup.png",
    ]
    for p in paths:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_no_acceptance_plot_without_sd(tmp_path):
    paths = write_plots(SweepSummary(levels=SUMMARY.levels[:2]), tmp_path)
    assert [p.name for p in paths] == ["pareto.png"]


def test_many_splits_get_separate_curves(tmp_path):
    splits = ("qualitative", "throughput_1k")
    levels = [r.model_copy(update={"split": s}) for r in SUMMARY.levels for s in splits]
    paths = write_plots(SweepSummary(levels=levels), tmp_path)
    assert len(paths) == 4


def test_rate_levels_get_their_own_plot_and_stay_off_the_batch_size_curves(tmp_path):
    from speedbench.report import plots

    rates = [
        COMMON
        | {"config": c, "batch_size": 0, "request_rate": rate, "per_user_tok_s": 2.0}
        | {"output_throughput_tok_s": 10 * rate, "e2e_p50_s": e2e, "goodput_rps": rate / 2}
        for c, e2e in (("none", 5.0), ("draft_model-k3", 4.0))
        for rate in (0.1, 0.2)
    ]
    summary = SweepSummary.model_validate({"levels": [*SUMMARY.levels, *rates]})
    curves = plots._curves(summary, lambda r: True)
    assert {r.batch_size for rows in curves.values() for r in rows} == {1, 4}
    rate_curves = plots._curves(summary, lambda r: True, open_loop=True)
    assert {k: [r.request_rate for r in v] for k, v in rate_curves.items()} == {
        "no SD": [0.1, 0.2],
        "draft_model-k3": [0.1, 0.2],
    }
    paths = write_plots(summary, tmp_path)
    assert "rates.png" in [p.name for p in paths]
    assert (tmp_path / "rates.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert plots.plot_rates(SUMMARY, tmp_path / "none.png") is None
