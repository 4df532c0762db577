"""speculation_profile.json out of speedbench's views and back in (hand-made and the main job's)."""

from __future__ import annotations

import json

import pytest

from speedbench import REPO_ROOT
from speedbench.cli import main
from speedbench.oracle.profile import (
    PROFILE_SUFFIX,
    accepted_pmf,
    export_profiles,
    profile_of,
    profile_requests,
    read_profile,
)
from speedbench.oracle.speedup import ReplayRequest
from speedbench.pipeline.stages import upgrade

MAIN_JOB = REPO_ROOT / "results" / "metrics" / "qualitative" / "acceptance.json"
# Four steps accepting 0, 1, 3 and 3 of k = 3 drafts: lengths 1, 2, 4, 4.
STEPS_VIEW = {
    "conditional_ar": [0.75, 2 / 3, 1.0],  # 3 of 4 accept >= 1, 2 of those 3 >= 2, both >= 3
    "joint_ar": [0.75, 0.5, 0.5],
    "al_token_weighted": 2.75,  # (1 + 2 + 4 + 4) / 4 = 1 + 0.75 + 0.5 + 0.5
    "al_request_mean": 2.6,
    "by_category": {"math": {"al_request_mean": 2.6, "al_token_weighted": 2.75, "count": 1}},
}
CONDITIONS = {"acceptance_view": "stream", "split": "qualitative"}


def test_a_view_becomes_both_conventions_and_predicts_shorter_k_by_the_chain_rule():
    profile = profile_of(STEPS_VIEW, "draft_model", 3, True, CONDITIONS)
    assert profile.conditional_accept_rates == pytest.approx([0.75, 2 / 3, 1.0])
    assert profile.marginal_accept_rates == [0.75, 0.5, 0.5]
    assert profile.mean_accept_length == 2.75
    assert profile.mean_accept_length_per_request == 2.6
    assert profile.per_category == {"math": {"al_request_mean": 2.6, "al_token_weighted": 2.75}}
    assert [profile.al_at(k) for k in (1, 2, 3)] == [1.75, 2.25, 2.75]
    with pytest.raises(ValueError, match="k = 4 was never drafted"):
        profile.al_at(4)


def good() -> dict:
    return profile_of(STEPS_VIEW, "draft_model", 3, True, CONDITIONS).model_dump(mode="json")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"conditional_accept_rates": [0.75, 0.5, 0.5],
          "marginal_accept_rates": [0.75, 2 / 3, 1.0]}, "rise with position"),
        ({"conditional_accept_rates": [0.75, 0.5, 0.5]}, "the two conventions swapped"),
        ({"mean_accept_length": 2.6}, "a per-request mean in the per-step field"),
        ({"marginal_accept_rates": [0.75, 0.5]}, "one of each per draft position"),
        ({"conditional_accept_rates": [1.5, 0.5, 1.0]}, r"must lie in \[0, 1\]"),
        ({"accept_length_model": "guess"}, "accept_length_model"),
    ],
    ids=["rising", "swapped", "per-request-mean", "short", "above-one", "unknown-model"],
)  # fmt: skip
def test_a_profile_that_breaks_its_identities_is_refused_in_one_line(tmp_path, change, message):
    path = tmp_path / "p.json"
    path.write_text(json.dumps({**good(), **change}))
    with pytest.raises(ValueError, match=message) as err:
        read_profile(path)
    assert str(path) in str(err.value) and "\n" not in str(err.value)


def test_a_peer_s_fields_are_kept_and_a_measured_per_k_profile_answers_only_at_its_k(tmp_path):
    path = tmp_path / "peer.json"
    peer = {**good(), "accept_length_model": "measured_per_k", "schema_version": 1,
            "draft_checkpoint": {"path": "/ckpt"}, "max_supported_k": 3}  # fmt: skip
    path.write_text(json.dumps(peer))
    profile = read_profile(path)
    assert profile.model_dump()["draft_checkpoint"] == {"path": "/ckpt"}
    assert profile.al_at(3) == 2.75
    with pytest.raises(ValueError, match="measured_per_k profile of k = 3 predicts nothing"):
        profile.al_at(2)
    (tmp_path / "broken.json").write_text("{not json")
    with pytest.raises(ValueError, match="not a readable JSON profile"):
        read_profile(tmp_path / "broken.json")


@pytest.mark.parametrize("view", ["speed_bench", "stream", "engine", "counters"])
def test_the_main_job_s_profiles_read_back_to_its_al_at_every_k(tmp_path, view):
    levels = upgrade(json.loads(MAIN_JOB.read_text()))
    written = export_profiles(levels, view, tmp_path, str(MAIN_JOB))
    by_level = {p.name.removesuffix(PROFILE_SUFFIX): read_profile(p) for p in written}
    checked = 0
    for key, views in levels.items():
        name = key.replace("/", "_")
        if name not in by_level:
            continue
        profile, figures = by_level[name], views[view]
        assert profile.measurement_conditions["acceptance_view"] == view
        assert profile.al_at(profile.num_speculative_tokens) == figures["al_token_weighted"]
        assert profile.marginal_accept_rates == figures["joint_ar"]
        assert profile.mean_accept_length_per_request == figures.get("al_request_mean")
        assert profile.measured == (not key.startswith("oracle-"))
        checked += 1
    # Every SD level holding the view with per-position rates, the oracle's every k included.
    expected = [k for k, v in levels.items() if view in v and v[view].get("joint_ar")
                and not k.startswith("none")]  # fmt: skip
    assert checked == len(expected) == len(written) > 0
    if view in ("speed_bench", "stream"):
        ks = {p.num_speculative_tokens for n, p in by_level.items() if n.startswith("oracle-draft")}
        assert ks == set(range(1, max(ks) + 1)) and max(ks) >= 3


def test_predict_shows_each_chain_figure_beside_the_oracle_s_own(tmp_path, capsys):
    main(["profile", "export", "--acceptance", str(MAIN_JOB), "--view", "speed_bench",
          "--out", str(tmp_path)])  # fmt: skip
    top = max(
        tmp_path.glob("oracle-draft_model-k*"), key=lambda p: read_profile(p).num_speculative_tokens
    )
    main(["profile", "predict", str(top), "--against", str(MAIN_JOB)])
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.strip().startswith("k=")]
    k = read_profile(top).num_speculative_tokens
    assert len(lines) == k and f"k={k}:" in lines[-1] and "(+0.00 %)" in lines[-1]
    # Shorter k from the top profile's marginal vector, against the oracle's replay at that k:
    # the chain rule's error is printed, and it is an error (steps restart at a shorter k).
    assert all("oracle" in line and "%" in line for line in lines)
    assert "(+0.00 %)" not in lines[0]


def test_export_and_predict_refuse_bad_input_in_one_line(tmp_path, capsys):
    assert main(["profile", "export", "--acceptance", str(tmp_path / "missing.json")]) == 2
    assert "missing.json" in capsys.readouterr().err
    (tmp_path / "bad.json").write_text(json.dumps({**good(), "mean_accept_length": 9.0}))
    assert main(["profile", "predict", str(tmp_path / "bad.json")]) == 2
    err = capsys.readouterr().err
    assert "is not 1 + sum(marginal)" in err and len(err.strip().splitlines()) == 1
    with pytest.raises(ValueError, match="no SD level holds the server view"):
        export_profiles(upgrade(json.loads(MAIN_JOB.read_text())), "server", tmp_path, "x")


def test_a_profile_cuts_each_answer_into_steps_that_follow_its_distribution():
    profile = profile_of(STEPS_VIEW, "draft_model", 3, True, CONDITIONS)
    baseline = [ReplayRequest.baseline(50, 401) for _ in range(25)]  # 400 tokens after prefill
    for k, pmf in ((3, [0.25, 0.25, 0.0, 0.5]), (2, [0.25, 0.25, 0.5]), (1, [0.25, 0.75])):
        assert accepted_pmf(profile, k) == pytest.approx(pmf)
        requests = profile_requests(baseline, profile, k)
        assert [sum(r.chunks) for r in requests] == [401] * 25  # every answer kept whole
        assert all(r.prompt_tokens == 50 and r.chunks[0] == 1 for r in requests)
        assert all(d == k for r in requests for d in r.drafted[1:])
        # Steps not cut by an answer's end follow the distribution within 1 %.
        steps = [c - 1 for r in requests for c in r.chunks[1:-1]]
        seen = [steps.count(a) / len(steps) for a in range(k + 1)]
        assert seen == pytest.approx(pmf, abs=0.01)
        assert sum(c for c in (s + 1 for s in steps)) / len(steps) == pytest.approx(
            profile.al_at(k), abs=0.01
        )
