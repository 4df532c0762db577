"""The generation protocol: stop at EOS or a fixed length; the prefix cache between levels.

The prefix cache is reset, kept or off, as each engine is told it and as the level records it.
"""

from __future__ import annotations

import yaml

from speedbench.config import EngineConfig, SpecConfig
from speedbench.engines import get_engine
from speedbench.metrics.summary import summarize_level
from speedbench.results import LevelMetrics, PrefixCacheFigures, tracking_scalars
from speedbench.run.plan import config_identity, engine_config, load_settings
from speedbench.sweep_config import SweepConfig

METRICS = """\
# TYPE vllm:prefix_cache_queries counter
vllm:prefix_cache_queries_total{engine="0",model_name="target"} 120.0
# TYPE vllm:prefix_cache_hits counter
vllm:prefix_cache_hits_total{engine="0",model_name="target"} 48.0
"""


def engine(mode: str, kind: str = "vllm") -> EngineConfig:
    return EngineConfig(kind=kind, model="/m", prefix_cache=mode)


def test_vllm_resets_through_its_development_endpoint_or_disables_caching():
    vllm = get_engine("vllm")
    assert vllm.prefix_cache_mode(engine("reset")) == "reset"
    assert vllm.server_env(engine("reset")) == {"VLLM_SERVER_DEV_MODE": "1"}
    assert vllm.server_env(engine("keep")) == {} == vllm.server_env(engine("off"))
    assert "--no-enable-prefix-caching" in vllm.server_args(engine("off"), SpecConfig())
    for mode in ("reset", "keep"):
        assert "--no-enable-prefix-caching" not in vllm.server_args(engine(mode), SpecConfig())
    assert vllm.reset_cache_path == "/reset_prefix_cache"


def test_vllm_prefix_cache_counters_are_read_in_tokens():
    vllm = get_engine("vllm")
    assert vllm.parse_prefix_cache(METRICS) == (120.0, 48.0)
    assert vllm.parse_prefix_cache("# nothing\n") is None


def test_sglang_flushes_its_radix_cache_or_disables_it():
    sglang = get_engine("sglang")
    assert sglang.reset_cache_path == "/flush_cache"
    assert sglang.prefix_cache_mode(engine("reset", "sglang")) == "reset"
    assert "--disable-radix-cache" in sglang.server_args(engine("off", "sglang"), SpecConfig())
    assert "--disable-radix-cache" not in sglang.server_args(
        engine("reset", "sglang"), SpecConfig()
    )


def test_trtllm_without_a_reset_endpoint_turns_reset_into_no_reuse():
    trtllm = get_engine("trtllm")
    assert trtllm.prefix_cache_mode(engine("reset", "trtllm")) == "off"
    assert trtllm.prefix_cache_mode(engine("keep", "trtllm")) == "keep"
    kept = yaml.safe_load(
        next(iter(trtllm.launch_files(engine("keep", "trtllm"), SpecConfig()).values()))
    )
    assert "kv_cache_config" not in kept


def test_stop_at_eos_is_the_load_and_the_identity():
    fixed, protocol = SweepConfig(), SweepConfig(stop_at_eos=True)
    assert load_settings(fixed).ignore_eos is True
    assert load_settings(protocol).ignore_eos is False
    eng = engine_config(protocol, "/m")
    assert eng.prefix_cache == "reset"
    ident = config_identity(protocol, eng, SpecConfig(), "qualitative", 1)
    assert ident["stop_at_eos"] is True and ident["prefix_cache"] == "reset"
    # A fixed length with the cache kept is what earlier sweeps measured: same identity keys.
    kept = SweepConfig(prefix_cache="keep")
    ident = config_identity(kept, engine_config(kept, "/m"), SpecConfig(), "qualitative", 1)
    assert "stop_at_eos" not in ident and "prefix_cache" not in ident


def test_a_level_records_its_cache_mode_and_hits():
    summary = summarize_level([], None, 3)
    cache = PrefixCacheFigures(mode="reset", query_tokens=120.0, hit_tokens=0.0)
    metrics = LevelMetrics(**dict(summary), prefix_cache=cache)
    assert metrics.prefix_cache.mode == "reset" and metrics.prefix_cache.hit_tokens == 0.0
    scalars, _ = tracking_scalars(metrics)
    assert scalars["prefix_cache_hit_tokens"] == 0.0
