"""Pure parts of the MLflow layer: redaction, flattening, metric extraction."""

import pytest
from pydantic import ValidationError

from speedbench.results import LevelMetrics, tracking_scalars
from speedbench.run.hooks import config_hash
from speedbench.secrets import REDACTED, redact, redact_args
from tasks.tracking import flatten


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("HF_TOKEN", "hf_abcdefghijklmnopqrstuvwxyz", REDACTED),
        ("hf_token", "anything", REDACTED),
        ("engine.env.API_KEY", "x", REDACTED),
        ("db_password", "x", REDACTED),
        ("aws_secret_access_key", "x", REDACTED),
        ("spec.num_speculative_tokens", 3, "3"),
        ("max_tokens", 96, "96"),
        ("model", "org/model", "org/model"),
        ("extra_args", "--hf-token hf_abcdefghijklmnopqrstuvwxyz1234", f"--hf-token {REDACTED}"),
    ],
)
def test_redact(key, value, expected):
    assert redact(key, value) == expected


def test_flatten_nested_mappings():
    assert flatten({"a": {"b": 1, "c": {"d": [1, 2]}}, "e": None}) == {
        "a.b": 1,
        "a.c.d": [1, 2],
        "e": None,
    }


def _load():
    dist = {"p50": 1.0, "p90": 2.0, "p99": 3.0, "mean": 1.5, "count": 4}
    return {
        "num_requests": 4,
        "num_failed": 0,
        "error_rate": 0.0,
        "output_tokens": 96,
        "duration_s": 9.6,
        "output_throughput_tok_s": 10.0,
        "per_user_tok_s": 5.0,
        **{name: dist for name in ("ttft_s", "tpot_s", "itl_s", "e2e_s")},
    }


def _view(name, token_weighted, request_mean, cond=(0.8, 0.6), joint=(0.8, 0.48)):
    return {
        "view": name,
        "k": 2,
        "units": {"speed_bench": "questions", "counters": "none", "server": "none"}.get(
            name, "requests"
        ),
        "count": 2,
        "num_steps": 10,
        "num_tokens": 25,
        "conditional_ar": list(cond),
        "joint_ar": list(joint),
        "al_token_weighted": token_weighted,
        "al_request_mean": request_mean,
    }


def _metrics(**overall):
    return LevelMetrics.model_validate(
        {
            "overall": {"load": _load(), **overall},
            "per_category": {
                "coding": {
                    "load": _load(),
                    "views": {
                        "speed_bench": _view("speed_bench", 2.75, 2.9),
                        "stream": _view("stream", 3.0, 3.1),
                    },
                },
                # A category whose name is also a figure's suffix must not collide with it.
                "engine_steps": {"load": _load(), "views": {"stream": _view("stream", 1.5, 1.4)}},
                "qa": {"load": _load()},
            },
        }
    )


def test_tracking_scalars_and_series():
    metrics = _metrics(
        views={
            "stream": _view("stream", 2.5, 2.6),
            "counters": _view("counters", 2.4, None, (0.7, 0.5), (0.7, 0.35)),
            "server": _view("server", 2.2, None, (None, None), (None, None)),
        }
    )
    scalars, series = tracking_scalars(metrics)
    assert scalars["al_stream"] == 2.5 and scalars["al_stream_request_mean"] == 2.6
    assert scalars["al_counters"] == 2.4 and "al_counters_request_mean" not in scalars
    # The engine's own running AL (SGLang) is the server view: one figure, no series.
    assert scalars["al_server"] == 2.2
    # Every view of a category is named: SPEED-Bench's Category_AL is its speed_bench request
    # mean, never the stream view's token-weighted AL.
    assert scalars["by_category/coding/al_speed_bench_request_mean"] == 2.9
    assert scalars["by_category/coding/al_speed_bench"] == 2.75
    assert scalars["by_category/coding/al_stream"] == 3.0
    assert scalars["by_category/coding/al_stream_request_mean"] == 3.1
    assert scalars["by_category/engine_steps/al_stream"] == 1.5
    assert "by_category/engine_steps/al_speed_bench_request_mean" not in scalars
    assert not any(k.startswith("by_category/qa") for k in scalars)
    assert not any(
        k.startswith("al_") and k.removeprefix("al_") in ("coding", "qa") for k in scalars
    )
    assert scalars["ttft_p99_s"] == 3.0 and scalars["itl_p50_s"] == 1.0
    assert series == {
        "conditional_ar_stream": [0.8, 0.6],
        "joint_ar_stream": [0.8, 0.48],
        "conditional_ar_counters": [0.7, 0.5],
        "joint_ar_counters": [0.7, 0.35],
    }


def test_a_renamed_figure_fails_where_it_is_read():
    bad = {"overall": {"load": _load(), "al_stream": 2.0}, "per_category": {}}
    with pytest.raises(ValidationError, match="al_stream"):
        LevelMetrics.model_validate(bad)
    # The per-view fields of schema 1 are gone: a file that has them is refused, not misread.
    old = {"overall": {"load": _load(), "acceptance_stream": {}}, "per_category": {}}
    with pytest.raises(ValidationError, match="acceptance_stream"):
        LevelMetrics.model_validate(old)


def test_a_results_file_of_another_schema_is_refused_in_one_line_and_re_measured(tmp_path):
    from speedbench.results import StaleResults
    from speedbench.run.level import load_level

    path = tmp_path / "metrics.json"
    path.write_text('{"overall": {}, "per_category": {}}')  # schema 1: no schema_version
    with pytest.raises(StaleResults, match=r"metrics.json: results schema 1, this speedbench"):
        LevelMetrics.read(path)
    assert load_level(tmp_path, "ngram-k3", "qualitative", 1) is None  # measured again
    current = _metrics()
    path.write_text(current.model_dump_json())
    assert LevelMetrics.read(path) == current and current.schema_version == 2


def test_config_hash_is_stable_and_order_free():
    assert config_hash({"a": 1, "b": [1, 2]}) == config_hash({"b": [1, 2], "a": 1})
    assert config_hash({"a": 1}) != config_hash({"a": 2})


def test_redact_args_hides_credential_flags_in_both_forms():
    args = ["--model", "/m", "--api-key", "abc", "--hf-token=xyz", "--num-speculative-tokens", "3"]
    assert redact_args(args) == [
        "--model",
        "/m",
        "--api-key",
        REDACTED,
        f"--hf-token={REDACTED}",
        "--num-speculative-tokens",
        "3",
    ]
    assert redact_args(["--x", "hf_" + "a" * 30]) == ["--x", REDACTED]
