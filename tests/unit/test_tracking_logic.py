"""Pure parts of the MLflow layer: redaction, flattening, metric extraction."""

import pytest

from speedbench.secrets import REDACTED, redact, redact_args
from speedbench.sweep import config_hash, level_metrics
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


def _acc(al, cond, joint):
    return {
        "al_token_weighted": al,
        "al_request_mean": al,
        "conditional_ar": cond,
        "joint_ar": joint,
    }


def test_level_metrics_scalars_and_series():
    dist = {"p50": 1.0, "p90": 2.0, "p99": 3.0, "mean": 1.5}
    metrics = {
        "overall": {
            "load": {
                "output_throughput_tok_s": 10.0,
                "per_user_tok_s": 5.0,
                "error_rate": 0.0,
                "num_requests": 4,
                "output_tokens": 96,
                "ttft_s": dist,
                "tpot_s": dist,
                "itl_s": dist,
                "e2e_s": dist,
            },
            "acceptance_stream": _acc(2.5, [0.8, 0.6], [0.8, 0.48]),
            "acceptance_counters": _acc(2.4, [0.7, 0.5], [0.7, 0.35]),
        },
        "per_category": {"coding": {"acceptance_stream": _acc(3.0, [], [])}, "qa": {"load": {}}},
    }
    scalars, series = level_metrics(metrics)
    assert scalars["al_stream"] == 2.5 and scalars["al_counters"] == 2.4
    assert scalars["al_coding"] == 3.0 and "al_qa" not in scalars
    assert scalars["ttft_p99_s"] == 3.0 and scalars["itl_p50_s"] == 1.0
    assert series == {
        "conditional_ar_stream": [0.8, 0.6],
        "joint_ar_stream": [0.8, 0.48],
        "conditional_ar_counters": [0.7, 0.5],
        "joint_ar_counters": [0.7, 0.35],
    }


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
