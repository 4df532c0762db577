"""Every row of docs/bad-inputs.md is tried here and must give exactly the message it lists.

The table is the user's reference for what speedbench says about bad input; this test keeps it
true. Each case returns the one-line message a user sees (the exception text, or the error
recorded on the request for faults while measuring). ``<tmp>`` in the table stands for the test's
temporary directory and ``<port>`` for the synthetic server's port.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest
from tests.integration.conftest import FAULTS

from speedbench.client.measure import run_load
from speedbench.config import ConfigError, EngineConfig, SpecConfig, load_config
from speedbench.config import load_params as read_params
from speedbench.data.prompts import PromptSetError, load_prompt_file
from speedbench.engines import get_engine
from speedbench.engines.base import EngineError
from speedbench.engines.launchers import check_available
from speedbench.engines.local import engine_python, free_port
from speedbench.pipeline.stages import stage_sweep
from speedbench.provision.models import ProvisionError, provision
from speedbench.run.level import validate_items
from speedbench.run.plan import load_split, per_config_forms
from speedbench.sweep_config import SweepConfig
from speedbench.workload import LoadSettings, WorkItem

pytestmark = pytest.mark.integration

DOC = Path(__file__).resolve().parents[2] / "docs" / "bad-inputs.md"
EXPECTED = (
    ConfigError,
    PromptSetError,
    EngineError,
    ProvisionError,
    ValueError,
)
CASES: dict[str, Callable[[Path, str], str]] = {}


def case(name: str):
    def deco(fn):
        CASES[name] = fn
        return fn

    return deco


def message(fn: Callable[[], object]) -> str:
    try:
        fn()
    except EXPECTED as exc:
        return str(exc)
    raise AssertionError("no error raised")


def sweep(**fields) -> str:
    base = {"model": "qwen2.5-coder-0.5b-instruct"}
    return message(lambda: load_config(SweepConfig, {**base, **fields}))


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


# --- results files --------------------------------------------------------------------------


@case("results-of-another-schema")
def _(tmp, url):
    from speedbench.sweep_summary import SweepSummary

    old = write(tmp / "summary.json", json.dumps({"levels": [], "status": "finished"}))
    return message(lambda: SweepSummary.read(old))


# --- parameters -----------------------------------------------------------------------------


@case("malformed-yaml")
def _(tmp, url):
    return message(lambda: read_params(write(tmp / "params.yaml", "measure:\n  limit: [1, 2\n")))


@case("params-not-a-mapping")
def _(tmp, url):
    return message(lambda: read_params(write(tmp / "params.yaml", "- 1\n- 2\n")))


@case("params-missing")
def _(tmp, url):
    return message(lambda: read_params(tmp / "nope.yaml"))


@case("qualitative-pool-below-k")
def _(tmp, url):
    from speedbench.data.qualitative import QualitativeParams

    return message(lambda: load_config(QualitativeParams, {"k": 500, "pool_size": 20}))


@case("params-section-missing")
def _(tmp, url):
    return message(lambda: stage_sweep({"models": {}}, "measure_qualitative", str(tmp)))


@case("params-section-not-a-mapping")
def _(tmp, url):
    return message(lambda: stage_sweep({"measure_qualitative": [1, 4]}, "measure_qualitative"))


@case("params-field-given-twice")
def _(tmp, url):
    section = {"batch_sizes": [1], "load": {"batch_sizes": [4]}}
    return message(lambda: stage_sweep({"measure_qualitative": section}, "measure_qualitative"))


@case("unknown-field")
def _(tmp, url):
    return sweep(batchsizes=[1, 2])


@case("unknown-section-field")
def _(tmp, url):
    return sweep(load={"batchsizes": [1, 2]})


@case("field-given-twice")
def _(tmp, url):
    return sweep(batch_sizes=[1], load={"batch_sizes": [4]})


@case("pool-with-oracle")
def _(tmp, url):
    fields = {"model": "m", "methods": ["ngram"], "draft_lengths": [3], "oracle": ["ngram"]}
    return message(lambda: per_config_forms(load_config(SweepConfig, fields)))


@case("best-k-without-oracle")
def _(tmp, url):
    return sweep(methods=["none", "ngram"], draft_lengths=[3], measure_best_k=True)


@case("pass-env-unset")
def _(tmp, url):
    from speedbench.engines.running import passed_env

    os.environ.pop("SPEEDBENCH_UNSET_TOKEN", None)
    engine = EngineConfig(model="m", pass_env=["SPEEDBENCH_UNSET_TOKEN"])
    return message(lambda: passed_env(engine))


@case("unknown-method")
def _(tmp, url):
    return sweep(methods=["none", "medusa"])


@case("unknown-split")
def _(tmp, url):
    return sweep(splits=["qualitative", "throughput_4k"])


@case("batch-size-zero")
def _(tmp, url):
    return sweep(batch_sizes=[0, 4])


@case("duplicate-batch-sizes")
def _(tmp, url):
    return sweep(batch_sizes=[1, 4, 4])


@case("empty-grid")
def _(tmp, url):
    return sweep(methods=[])


@case("draft-lengths-without-sd")
def _(tmp, url):
    return sweep(methods=["none"], draft_lengths=[3])


@case("oracle-not-greedy")
def _(tmp, url):
    return sweep(methods=["none", "ngram"], draft_lengths=[3], oracle=["ngram"], temperature=0.7)


@case("oracle-draft-without-draft")
def _(tmp, url):
    return sweep(methods=["none", "ngram"], draft_lengths=[3], oracle=["draft_model"])


@case("oracle-baseline-without-prompt-ids")
def _(tmp, url):
    from speedbench.cli import build_parser
    from speedbench.records import RequestRecord, write_parquet

    level = tmp / "bs1"
    write_parquet([RequestRecord("r", "q", output_token_ids=[1, 2])], level / "records.parquet")
    args = build_parser().parse_args(["oracle", "--baseline", str(level), "--drafter", "ngram"])
    return message(lambda: args.func(args))


@case("draft-model-method-without-draft")
def _(tmp, url):
    spec = {"method": "draft_model", "num_speculative_tokens": 3}
    return message(lambda: load_config(SpecConfig, spec))


@case("draft-model-on-ngram")
def _(tmp, url):
    spec = {"method": "ngram", "num_speculative_tokens": 3, "draft_model": "/d"}
    return message(lambda: load_config(SpecConfig, spec))


@case("negative-output-len")
def _(tmp, url):
    return sweep(output_len=-5)


@case("splits-and-prompt-file")
def _(tmp, url):
    return sweep(splits=["mtbench"], prompt_file=str(tmp / "p.jsonl"))


@case("tracking-field-on-the-cli")
def _(tmp, url):
    from speedbench.cli import build_parser

    args = build_parser().parse_args(["sweep", "--config", str(tmp / "s.yaml")])
    write(tmp / "s.yaml", "tracking_uri: sqlite:///x.db\n")
    return message(lambda: args.func(args))


@case("port-out-of-range")
def _(tmp, url):
    return message(lambda: load_config(EngineConfig, {"model": "m", "port": 70000}))


# --- engines and models ---------------------------------------------------------------------


@case("unknown-engine")
def _(tmp, url):
    return message(lambda: get_engine("tgi"))


@case("method-the-engine-lacks")
def _(tmp, url):
    # What a sweep checks before it launches anything, the baseline included.
    from speedbench.run.plan import check_specs

    engine = EngineConfig(kind="trtllm", model="m", launcher="docker")
    specs = [SpecConfig(), SpecConfig(method="suffix", num_speculative_tokens=3)]
    return message(lambda: check_specs(engine, specs))


@case("flag-the-release-lacks")
def _(tmp, url):
    from speedbench.run.plan import check_specs

    engine = EngineConfig(
        kind="sglang", model="m", launcher="docker", image="lmsysorg/sglang:v0.5.23-cu129"
    )
    spec = SpecConfig(method="ngram", num_speculative_tokens=3, prompt_lookup_max=4)
    return message(lambda: check_specs(engine, [SpecConfig(), spec]))


@case("release-unknown")
def _(tmp, url):
    from speedbench.run.plan import check_specs

    image = "nvcr.io/nvidia/tensorrt-llm/release:latest"
    engine = EngineConfig(kind="trtllm", model="m", launcher="docker", image=image)
    spec = SpecConfig(method="draft_model", num_speculative_tokens=3, draft_model="/d")
    return message(lambda: check_specs(engine, [spec]))


@case("unknown-packaged-model")
def _(tmp, url):
    return message(lambda: provision("gpt-5-nano"))


@case("abbreviated-flag")
def _(tmp, url):
    import contextlib
    import io

    from speedbench.cli import main as cli_main

    err = io.StringIO()
    with contextlib.redirect_stderr(err), pytest.raises(SystemExit):
        cli_main(["sweep", "--out", "x"])
    return err.getvalue().strip().splitlines()[-1]


@case("unknown-model")
def _(tmp, url):
    from speedbench.tokenize import PromptTokenizer

    return message(lambda: PromptTokenizer.from_pretrained("some-unknown-name"))


@case("batch-over-engine-cap")
def _(tmp, url):
    from speedbench.run.plan import check_concurrency

    engine = EngineConfig(kind="sglang", model="m")
    spec = SpecConfig(method="ngram", num_speculative_tokens=3)
    return message(lambda: check_concurrency(engine, [spec], [1, 64]))


@case("engine-env-missing")
def _(tmp, url):
    return message(lambda: engine_python(EngineConfig(model="m", python=str(tmp / "bin/python"))))


@case("port-in-use")
def _(tmp, url):
    import socket

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        engine = EngineConfig(model="m", port=held.getsockname()[1], python=sys.executable)
        return message(lambda: check_available(engine)).replace(str(engine.port), "<port>")


# --- prompt sets ----------------------------------------------------------------------------


@case("split-not-built")
def _(tmp, url):
    return message(lambda: load_split("throughput_2k", tmp))


@case("speed-bench-placeholders")
def _(tmp: Path, url: str) -> str:
    # SPEED-Bench's hub rows of sources it may not redistribute, given to the CLI as they are.
    rows = [
        {"question_id": "a", "category": "qa", "turns": ["What is DNA?"], "source": "mine"},
        {"question_id": "b", "category": "rag", "source": "nvidia/ChatRAG-Bench",
         "turns": ["FULL BENCHMARK DATA SHOULD BE FETCHED FROM THE SOURCE USING SPECDEC_BENCH"]},
    ]  # fmt: skip
    path = write(tmp / "qualitative.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    proc = subprocess.run(
        [sys.executable, "-m", "speedbench.cli", "sweep", "--prompt-file", str(path),
         "--methods", "none", "--out-dir", str(tmp / "out")],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 2 and not (tmp / "out").exists(), proc.stderr
    return proc.stderr.strip().removeprefix("speedbench: error: ")


@case("prompt-file-missing")
def _(tmp, url):
    return message(lambda: load_prompt_file(tmp / "prompts.jsonl"))


@case("prompt-row-malformed-json")
def _(tmp, url):
    text = '{"question_id": "a", "category": "math", "turns": ["2+2?"]}\n{"question_id": \n'
    return message(lambda: load_prompt_file(write(tmp / "p.jsonl", text)))


@case("prompt-file-not-utf8")
def _(tmp, url):
    good = '{"question_id": "a", "category": "qa", "turns": ["Hi"]}\n'
    path = tmp / "p.jsonl"
    path.write_bytes(
        good.encode() + b'{"question_id": "b", "category": "qa", "turns": ["caf' + b'\xe9"]}\n'
    )
    return message(lambda: load_prompt_file(path))


@case("prompt-row-empty-turn")
def _(tmp, url):
    text = '{"question_id": "a", "category": "math", "turns": ["2+2?", "  "]}\n'
    return message(lambda: load_prompt_file(write(tmp / "p.jsonl", text)))


@case("prompt-row-missing-column")
def _(tmp, url):
    frame = pd.DataFrame({"question_id": ["a"], "turns": [["hi"]]})
    frame.to_parquet(tmp / "p.parquet")
    return message(lambda: load_prompt_file(tmp / "p.parquet"))


@case("duplicate-question-id")
def _(tmp, url):
    row = '{"question_id": "a", "category": "math", "turns": ["2+2?"]}\n'
    return message(lambda: load_prompt_file(write(tmp / "p.jsonl", row + row)))


@case("token-id-out-of-vocabulary")
def _(tmp, url):
    items = [WorkItem("ok", prompt_ids=(1, 2)), WorkItem("t7", prompt_ids=(5, 151936))]
    return message(lambda: validate_items(items, 151936))


# --- faults while measuring (recorded on the request, the run goes on) ----------------------


def fault(url: str, first_id: int, timeout_s: float = 2.0) -> str:
    port = int(url.rsplit(":", 1)[1])
    result = run_load(
        EngineConfig(model="m", port=port),
        SpecConfig(),
        get_engine("vllm"),
        [WorkItem("p", prompt_ids=(first_id, 1))],
        LoadSettings(max_tokens=20, show_progress=False, request_timeout_s=timeout_s),
    )
    (rec,) = result.records
    return f"{rec.error_kind}: {rec.error}"


for _token, _kind in FAULTS.items():
    if _kind == "http_429":
        continue  # retried, then measured: not an error
    CASES[f"fault-{_kind.replace('_', '-')}"] = lambda tmp, url, t=_token: fault(url, t)
CASES["fault-out-of-vocabulary"] = lambda tmp, url: fault(url, 10**6)
CASES["engine-unreachable"] = lambda tmp, url: fault(f"http://127.0.0.1:{free_port()}", 1)


def documented() -> dict[str, str]:
    rows = {}
    for line in DOC.read_text().splitlines():
        # The message is a code span: `msg`, or `` msg `` when it holds backticks itself.
        m = re.match(r"\|\s*`([a-z0-9-]+)`\s*\|[^|]*\|\s*(?:`` (.*) ``|`(.*)`)\s*\|\s*$", line)
        if m:
            rows[m.group(1)] = (m.group(2) or m.group(3)).replace("\\|", "|")
    return rows


def normalize(text: str, tmp: Path) -> str:
    text = text.replace(str(tmp), "<tmp>")
    return re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:<port>", text)


def test_the_table_lists_every_case_and_at_least_twenty():
    assert set(documented()) == set(CASES)
    assert len(CASES) >= 20


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_bad_input_gets_its_documented_message(name, tmp_path, fault_server):
    got = normalize(CASES[name](tmp_path, fault_server), tmp_path)
    assert "\n" not in got
    assert got == documented()[name]


if __name__ == "__main__":  # print the current messages, to write the table
    import tempfile

    from speedbench.testing.synthetic import SyntheticOptions, serve_in_subprocess

    options = SyntheticOptions(k=3, interval_s=0.001, faults=FAULTS, stall_s=5.0)
    with serve_in_subprocess(options, free_port()) as server, tempfile.TemporaryDirectory() as d:
        for name, fn in CASES.items():
            sub = Path(d) / name
            sub.mkdir()
            print(f"{name}\t{normalize(fn(sub, server), sub)}")


def test_a_port_left_in_time_wait_is_free():
    """A server that just stopped leaves TIME_WAIT connections; the next one may still bind."""
    import socket

    with socket.socket() as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port))
        conn, _ = server.accept()
        conn.close()  # the server side closes first: its end goes to TIME_WAIT
        client.close()
    # SGLang's command is the interpreter itself, so only the port is in question here.
    check_available(EngineConfig(kind="sglang", model="m", port=port, python=sys.executable))
