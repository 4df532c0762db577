"""The oracle's commands: ``speedbench oracle``, ``oracle-sampled`` and ``tune``.

Each replays a measured level or a sweep's speedup model without starting an engine: the greedy
oracle (:mod:`speedbench.oracle.predict`), the sampled one (:mod:`speedbench.oracle.sampled`)
and the draft-length schedule (:mod:`speedbench.oracle.schedule`). Argument parsing and printing
live here, the work in those modules; :mod:`speedbench.cli` adds these subcommands to its own.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any, get_args

from speedbench.config import TREE_SHAPE, ConfigError
from speedbench.figures import ViewName
from speedbench.provision.models import resolve_dtype, resolve_model

DTYPES = ["auto", "float32", "bfloat16"]
DTYPE_HELP = "weights/compute dtype; auto = bfloat16 on CPUs with native bf16, else float32"


def _oracle(args: argparse.Namespace) -> Any:
    from speedbench.oracle.in_sweep import baseline_eos
    from speedbench.oracle.predict import OracleLevel, check_measured, figures_at, predict
    from speedbench.records import read_parquet
    from speedbench.report.oracle import al_by_k_table, check_table, render_variants
    from speedbench.results import write_json

    baseline = Path(args.baseline)
    if not (baseline / "records.parquet").exists():
        raise ConfigError(f"{baseline}: no records.parquet (give a measured baseline level)")
    if args.drafter == "draft_model" and not args.draft:
        raise ConfigError("--drafter draft_model needs --draft (a packaged name or local folder)")
    if args.drafter == "eagle3" and not (args.draft and args.target):
        raise ConfigError("--drafter eagle3 needs --draft (the head's folder) and --target")
    if not 1 <= args.ngram_min <= args.ngram_max:
        raise ConfigError(f"n-gram sizes need 1 <= --ngram-min <= --ngram-max, got "
                          f"{args.ngram_min}..{args.ngram_max}")  # fmt: skip
    ks = list(range(1, args.max_k + 1))
    dtype = resolve_dtype(args.dtype)
    if (args.draft_vocab or args.trees) and args.drafter != "draft_model":
        raise ConfigError("--draft-vocab and --trees are a draft model's: --drafter draft_model")
    for shape in args.trees:
        if not re.fullmatch(TREE_SHAPE, shape):
            raise ConfigError(f"--trees: a tree is breadths per depth like 2x2x2, got {shape!r}")
    draft = vocab = None
    if args.drafter == "draft_model":
        from speedbench.oracle.draft import load_draft
        from speedbench.oracle.variants import pruned_vocab

        weights = resolve_model(args.draft, dtype=dtype)
        draft = load_draft(weights, dtype)
        if args.draft_vocab:
            try:
                vocab = pruned_vocab(weights, args.draft_vocab)
            except ValueError as exc:
                raise ConfigError(f"--draft-vocab: {exc}") from None
    if args.drafter == "eagle3":
        from speedbench.eagle3.chains import Eagle3Drafter
        from speedbench.eagle3.pipeline import TORCH_DTYPES

        try:
            draft = Eagle3Drafter.load(args.draft, resolve_model(args.target, dtype=dtype),
                                       TORCH_DTYPES[dtype])  # fmt: skip
        except ValueError as exc:
            raise ConfigError(f"--draft: {exc}") from None
    eos_id = baseline_eos(baseline)
    try:
        prediction = predict(read_parquet(baseline / "records.parquet"), args.drafter, ks,
                             draft=draft, ngram=(args.ngram_min, args.ngram_max),
                             kept=vocab.kept if vocab else None)  # fmt: skip
    except ValueError as exc:
        raise ConfigError(f"{baseline}: {exc}") from None
    by_k = [figures_at(prediction, args.drafter, k, eos_id) for k in ks]
    for level_dir in map(Path, args.measured):
        records = read_parquet(level_dir / "records.parquet")
        k = next((r.k for r in records), 0)
        if k not in ks:
            raise ConfigError(f"{level_dir}: measured at k={k}, outside --max-k {args.max_k}")
        check = check_measured(prediction, k, records, str(level_dir), eos_id,
                               next((r.batch_size for r in records), 0))  # fmt: skip
        by_k[k - 1] = by_k[k - 1].model_copy(update={"checks": [*by_k[k - 1].checks, check]})
    level = OracleLevel.of(
        prediction,
        args.drafter,
        by_k,
        str(baseline),
        draft_model=args.draft,
        dtype=dtype,
        ngram=(args.ngram_min, args.ngram_max),
    )
    if prediction.draft_pass is not None and (vocab or args.trees):
        from speedbench.oracle.variants import draft_variants

        variants = draft_variants(prediction, prediction.draft_pass, ks,
                                  vocab.kept if vocab else {}, vocab.source if vocab else None,
                                  args.trees, eos_id)  # fmt: skip
        level = level.model_copy(update={"variants": variants})
    out = Path(args.out) if args.out else baseline / f"oracle-{args.drafter}.json"
    write_json(out, level.model_dump(mode="json"))
    print("\n".join([*al_by_k_table(level), *render_variants(level)]))
    if table := check_table([level]):
        print("\n" + "\n".join(table))
    print(f"\n{level.questions} questions, {level.seconds:.1f} s; wrote {out}")
    return level


def _oracle_sampled(args: argparse.Namespace) -> Any:
    from speedbench.oracle.sampled import render_sampled, run_sampled_oracle
    from speedbench.results import write_json

    baseline = Path(args.baseline)
    if not (baseline / "records.parquet").exists():
        raise ConfigError(f"{baseline}: no records.parquet (give a measured baseline level)")
    dtype = resolve_dtype(args.dtype)
    try:
        oracle = run_sampled_oracle(
            baseline,
            resolve_model(args.target, dtype=dtype),
            resolve_model(args.draft, dtype=dtype),
            dtype,
            list(range(1, args.max_k + 1)),
            [Path(m) for m in args.measured],
        )
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    out = Path(args.out) if args.out else baseline / "oracle-sampled.json"
    write_json(out, oracle.model_dump(mode="json"))
    print("\n".join(render_sampled(oracle)) + f"\nwrote {out}")
    return oracle


def _tune(args: argparse.Namespace) -> Any:
    from speedbench.engines.base import UnsupportedSpecError
    from speedbench.oracle.in_sweep import read_speedup_model
    from speedbench.oracle.schedule import engine_schedules
    from speedbench.report.oracle import render_speedup
    from speedbench.results import write_json

    sweep = Path(args.results)
    if args.refit:
        from speedbench.oracle.in_sweep import refit_speedup_model

        try:
            refit_speedup_model(sweep, args.token_budget)
        except (ValueError, FileNotFoundError) as exc:
            raise ConfigError(f"{sweep}: cannot refit the speedup model: {exc}") from None
        from speedbench.report.plots import write_plots
        from speedbench.sweep_summary import SweepSummary

        write_plots(SweepSummary.read(sweep / "summary.json"), sweep / "plots")
    model = read_speedup_model(sweep)
    if model is None:
        raise ConfigError(
            f"{sweep}: no oracle/speedup_model.json (a sweep folder whose sweep ran the oracle "
            "and draft_cost, e.g. results/qualitative)"
        )
    if args.profile:
        from speedbench.oracle.in_sweep import profile_schedule
        from speedbench.oracle.profile import read_profile

        try:
            profile = read_profile(Path(args.profile))
            plan = profile_schedule(sweep, profile)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        args.drafter = profile.method
        print(f"{args.profile}: {profile.method} up to k = {profile.num_speculative_tokens}, "
              f"priced by {sweep}'s step costs: {plan.ranges}")  # fmt: skip
    else:
        plans = [s for s in model.schedules if s.drafter == args.drafter]
        if not plans:
            made = sorted({s.drafter for s in model.schedules}) or ["none"]
            raise ConfigError(f"{sweep}: no schedule for {args.drafter}; it has {', '.join(made)}")
        plan = plans[0]
    if args.drafter == "draft_model" and not args.draft:
        raise ConfigError("--drafter draft_model needs --draft (the draft as the engine sees it)")
    ngram = None if args.drafter == "draft_model" else (args.ngram_min, args.ngram_max)
    try:
        files = engine_schedules(
            args.drafter, plan.ranges, args.draft, ngram, args.sglang_image, args.trtllm_image
        )
    except UnsupportedSpecError as exc:
        raise ConfigError(str(exc)) from None
    print("\n".join(render_speedup(model)))
    vllm = files["vllm"]["speculative_config"]
    print(f"\nvllm serve ... --speculative-config '{json.dumps(vllm)}'" if vllm else
          "\nvLLM: SD off at every batch size (no --speculative-config)")  # fmt: skip
    for launch in files["sglang"]["launches"]:
        first, last = launch["batch_sizes"]
        print(f"{files['sglang']['image']}, batch sizes {first}-{last}: {' '.join(launch['args'])}")
    name = f"schedule-{args.drafter}{'-profile' if args.profile else ''}.json"
    out = Path(args.out) if args.out else sweep / "oracle" / name
    out.parent.mkdir(parents=True, exist_ok=True)
    engine_files = write_engine_files(files, out.parent, args.drafter)
    write_json(out, files)
    for path in [out, *engine_files]:
        print(f"wrote {path}")
    return files


def write_engine_files(files: dict[str, Any], folder: Path, drafter: str) -> list[Path]:
    """The files an engine loads as they are: SGLang's adaptive config, TensorRT-LLM's YAML."""
    import yaml

    from speedbench.results import write_json

    written = []
    adaptive = files["sglang"].get("adaptive")
    if adaptive is not None:
        path = folder / f"sglang-adaptive-{drafter}.json"
        adaptive["args"][-1] = adaptive["config_file"] = str(path)
        write_json(path, adaptive["config"])
        print(f"{files['sglang']['image']}, every batch size: {' '.join(adaptive['args'])}")
        written.append(path)
    trtllm = files["trtllm"]
    if "unsupported" in trtllm:
        print(f"TensorRT-LLM: no draft_len_schedule: {trtllm['unsupported']}")
    else:
        path = folder / f"trtllm-{drafter}.yaml"
        path.write_text(yaml.safe_dump(trtllm["llm_api_options"], sort_keys=False))
        print(f"{trtllm['image']}: trtllm-serve ... --extra_llm_api_options {path}")
        written.append(path)
    return written


def _profile_export(args: argparse.Namespace) -> list[Path]:
    from speedbench.oracle.profile import export_profiles
    from speedbench.pipeline.stages import upgrade

    source = Path(args.acceptance)
    try:
        levels = upgrade(json.loads(source.read_text()))
        written = export_profiles(levels, args.view, Path(args.out), str(source))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{source}: {exc}" if str(source) not in str(exc) else str(exc)) from None
    print(f"wrote {len(written)} profiles ({args.view} view) to {args.out}")
    return written


def _profile_predict(args: argparse.Namespace) -> list[dict[str, Any]]:
    from speedbench.oracle.profile import read_profile
    from speedbench.pipeline.stages import upgrade

    try:
        profile = read_profile(Path(args.profile))
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    view = profile.measurement_conditions.get("acceptance_view")
    split = profile.measurement_conditions.get("split")
    against: dict[str, Any] = {}
    if args.against:
        levels = upgrade(json.loads(Path(args.against).read_text()))
        prefix = f"oracle-{profile.method}-k"
        against = {key: figures for key, figures in levels.items()
                   if key.startswith(prefix) and f"/{split}/" in key}  # fmt: skip
    rows = []
    print(f"{profile.method}, k = {profile.num_speculative_tokens} ({view or 'unnamed'} view, "
          f"{profile.accept_length_model}): AL per step")  # fmt: skip
    for k in range(1, profile.num_speculative_tokens + 1):
        predicted = profile.al_at(k)
        row: dict[str, Any] = {"k": k, "al_predicted": predicted}
        oracle = next(
            (f for key, f in against.items() if key.split("/")[0].endswith(f"-k{k}")), None
        )
        if oracle is not None and view in oracle:
            row["al_oracle"] = oracle[view]["al_token_weighted"]
            row["error"] = predicted / row["al_oracle"] - 1
            print(f"  k={k}: {predicted:.4f}  oracle {row['al_oracle']:.4f}  "
                  f"({100 * row['error']:+.2f} %)")  # fmt: skip
        else:
            print(f"  k={k}: {predicted:.4f}")
        rows.append(row)
    return rows


def add_oracle_commands(sub: Any) -> None:
    """Add ``oracle``, ``oracle-sampled``, ``tune`` and ``profile`` to a subparsers action."""
    pf = sub.add_parser(
        "profile",
        help="acceptance profiles as speculation_profile.json: export a stage's, predict from one",
        description="export: one speculation_profile.json (Model-Optimizer's form: conditional "
        "and marginal AR per position, AL per step and per request) per SD level of a stage's "
        "acceptance.json, from one named view. predict: AL at every k up to the profile's own "
        "(1 + sum of the marginal rates), beside the oracle's own figure where --against "
        "names a stage's acceptance.json.",
    )
    pf_sub = pf.add_subparsers(dest="profile_command", required=True)
    pe = pf_sub.add_parser("export", help="write a stage's SD levels as profiles")
    pe.add_argument(
        "--acceptance",
        default="results/metrics/qualitative/acceptance.json",
        help="a stage's acceptance.json (default: the main job's qualitative stage)",
    )
    pe.add_argument(
        "--view",
        default="speed_bench",
        # Every view with per-position rates (the server's is one running AL).
        choices=[v for v in get_args(ViewName) if v != "server"],
        help="the acceptance view the profiles are written from (default: SPEED-Bench's own)",
    )
    pe.add_argument("--out", default="results/profiles", help="the folder written to")
    pe.set_defaults(func=_profile_export)
    pp = pf_sub.add_parser("predict", help="AL at every k from one profile")
    pp.add_argument("profile", help="a speculation_profile.json")
    pp.add_argument("--against", help="an acceptance.json whose oracle levels to compare with")
    pp.set_defaults(func=_profile_predict)
    oc = sub.add_parser(
        "oracle",
        help="predict greedy acceptance for every k from a measured baseline level",
        description="Replay a no-SD level's greedy answers under a drafter (a draft model's "
        "teacher-forced pass, an EAGLE-3 head's unrolled chains, or vLLM's prompt lookup) and "
        "print AL by k per category "
        "(SPEED-Bench's view); --measured checks SD levels step by step (docs/oracle.md).",
    )
    oc.add_argument("--baseline", required=True, help="a baseline level folder (records.parquet)")
    oc.add_argument("--drafter", required=True, choices=["draft_model", "ngram", "eagle3"])
    oc.add_argument("--draft", help="draft_model: the draft (packaged name or local folder); "
                    "eagle3: the head's folder (speedbench eagle3 train)")  # fmt: skip
    oc.add_argument("--target", help="eagle3: the target whose features the head reads")
    oc.add_argument("--dtype", default="auto", choices=DTYPES, help=DTYPE_HELP)
    oc.add_argument("--max-k", type=int, default=6, choices=range(1, 17), metavar="1..16",
                    help="predict k = 1..max-k (default 6)")  # fmt: skip
    oc.add_argument("--ngram-min", type=int, default=1, help="ngram: shortest n-gram (1)")
    oc.add_argument("--ngram-max", type=int, default=4, help="ngram: longest n-gram (4)")
    oc.add_argument("--measured", nargs="*", default=[], help="SD level folders to check")
    oc.add_argument(
        "--draft-vocab",
        nargs="*",
        type=int,
        default=[],
        metavar="N",
        help="draft_model: also the draft pruned to its N most frequent tokens "
        "(counted over the throughput corpora)",
    )
    oc.add_argument(
        "--trees",
        nargs="*",
        default=[],
        metavar="SHAPE",
        help="draft_model: also static trees, breadth per depth like 4x4x4",
    )
    oc.add_argument("--out", help="oracle JSON (default: <baseline>/oracle-<drafter>.json)")
    oc.set_defaults(func=_oracle)

    os_ = sub.add_parser(
        "oracle-sampled",
        help="predict acceptance at temperature > 0 from a sampled baseline level",
        description="Teacher-force the target and the draft along a no-SD level's answers "
        "sampled at T > 0 and predict SPEED-Bench's AL for every k under speculative sampling, "
        "for a greedy draft (vLLM's default) and a probabilistic one; --measured checks SD "
        "levels at the same temperature on the same questions (docs/oracle.md).",
    )
    os_.add_argument("--baseline", required=True, help="a no-SD level sampled at T > 0")
    os_.add_argument("--target", required=True, help="the target (packaged name or local folder)")
    os_.add_argument("--draft", required=True, help="the draft (packaged name or local folder)")
    os_.add_argument("--dtype", default="auto", choices=DTYPES, help=DTYPE_HELP)
    os_.add_argument("--max-k", type=int, default=6, choices=range(1, 17), metavar="1..16",
                     help="predict k = 1..max-k (default 6)")  # fmt: skip
    os_.add_argument("--measured", nargs="*", default=[], help="SD level folders to check")
    os_.add_argument("--out", help="JSON (default: <baseline>/oracle-sampled.json)")
    os_.set_defaults(func=_oracle_sampled)

    tn = sub.add_parser(
        "tune",
        help="the draft length for every batch size, as vLLM, SGLang and TensorRT-LLM load it",
        description="Read a sweep's speedup model (its step costs and the oracle's AL for "
        "every k, or a --profile's) and write the best k per batch-size range in each engine's "
        "syntax: vLLM's --speculative-config with num_speculative_tokens_per_batch_size, SGLang's "
        "launches per range and adaptive config, TensorRT-LLM's draft_len_schedule YAML.",
    )
    tn.add_argument("--results", required=True, help="a sweep folder (e.g. results/qualitative)")
    tn.add_argument("--drafter", default="draft_model", choices=["draft_model", "ngram"])
    tn.add_argument(
        "--profile",
        help="a speculation_profile.json (measured elsewhere) whose acceptance the schedule is "
        "made from, priced by this sweep's step costs (its drafter replaces --drafter)",
    )
    tn.add_argument("--draft", help="draft_model: the draft's path or id as the engine sees it")
    tn.add_argument(
        "--refit",
        action="store_true",
        help="fit the step costs and replay every k again on the sweep's records (after a "
        "change to the model; the oracle's draft pass runs again)",
    )
    tn.add_argument(
        "--token-budget",
        type=int,
        help="with --refit: the engine's most tokens per iteration, by which prompts were "
        "prefilled in chunks (vLLM's max_num_batched_tokens; default: the model's own)",
    )
    tn.add_argument(
        "--sglang-image",
        help="the SGLang image whose release's flags the launches use (default: the pinned one)",
    )
    tn.add_argument(
        "--trtllm-image",
        help="the TensorRT-LLM image whose release's draft_len_schedule keys the YAML uses "
        "(default: the pinned one)",
    )
    tn.add_argument("--ngram-min", type=int, default=1, help="ngram: shortest n-gram (1)")
    tn.add_argument("--ngram-max", type=int, default=4, help="ngram: longest n-gram (4)")
    tn.add_argument(
        "--out", help="schedule JSON (default: <results>/oracle/schedule-<drafter>.json)"
    )
    tn.set_defaults(func=_tune)
