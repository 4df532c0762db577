"""A pool sweep's forms: one per SD configuration, each valid on its own, in its own folder."""

from __future__ import annotations

from speedbench.run.plan import per_config_forms
from speedbench.sweep_config import SweepConfig

BASE = dict(
    name="grid",
    model="m",
    draft_model="d",
    methods=["none", "draft_model", "ngram"],
    draft_lengths=[2, 3],
    batch_sizes=[1, 4],
    out_dir="out",
    draft_cost=True,
)


def test_one_form_per_configuration_each_measuring_only_its_own():
    forms = per_config_forms(SweepConfig(**BASE))
    assert [label for label, _ in forms] == [
        "none",
        "draft_model-k2",
        "draft_model-k3",
        "ngram-k2",
        "ngram-k3",
    ]
    for label, form in forms:
        assert [s.label for s in form.spec_configs()] == [label]
        assert form.output.out_dir == f"out/grid/workers/{label}"
        assert form.draft_cost is False  # the draft-alone levels need one host for all
        assert form.load.batch_sizes == [1, 4] and form.name == "grid"


def test_with_a_rate_sweep_each_sd_form_lists_the_baseline_to_resume_its_levels():
    forms = dict(per_config_forms(SweepConfig(**BASE, rate_sweep=2)))
    assert [s.label for s in forms["none"].spec_configs()] == ["none"]
    assert [s.label for s in forms["ngram-k3"].spec_configs()] == ["none", "ngram-k3"]


def test_a_pool_worker_takes_its_engine_port_from_its_host(monkeypatch):
    from flows.pool import with_host_facts, worker_command

    form = SweepConfig(**BASE)
    monkeypatch.delenv("SPEEDBENCH_ENGINE_PORT", raising=False)
    assert with_host_facts(form).engine.port == 8000
    monkeypatch.setenv("SPEEDBENCH_ENGINE_PORT", "8123")
    assert with_host_facts(form).engine.port == 8123
    argv, env = worker_command("p", "host-a", "2-3", 8200)
    assert argv[-8:] == ["--pool", "p", "--type", "process", "--limit", "1", "--name", "host-a"]
    assert env["SPEEDBENCH_ENGINE_CPUS"] == "2-3" and env["SPEEDBENCH_ENGINE_PORT"] == "8200"
