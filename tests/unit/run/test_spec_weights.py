"""What draft weights each SD config launches with: the sweep's draft, or a named head."""

from speedbench.config import SpecConfig
from speedbench.run.sweep import _with_weights


def test_a_named_head_folder_goes_by_its_absolute_path_and_a_hub_id_as_given(tmp_path, monkeypatch):
    (tmp_path / "heads" / "full").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    local = SpecConfig(method="eagle3", num_speculative_tokens=3, draft_model="heads/full",
                       variant="full")  # fmt: skip
    assert _with_weights(local, "/prov/draft").draft_model == str(tmp_path / "heads" / "full")
    hub = local.model_copy(update={"draft_model": "org/eagle3-head", "variant": "hub"})
    assert _with_weights(hub, "/prov/draft").draft_model == "org/eagle3-head"


def test_the_sweeps_draft_is_the_provisioned_one_and_a_text_drafter_keeps_none():
    draft = SpecConfig(method="draft_model", num_speculative_tokens=3, draft_model="qwen-0.5b")
    assert _with_weights(draft, "/prov/draft").draft_model == "/prov/draft"
    ngram = SpecConfig(method="ngram", num_speculative_tokens=3)
    assert _with_weights(ngram, "/prov/draft").draft_model is None
