"""Typed configuration for engines, speculative decoding and sweeps.

Every model forbids unknown fields, so a typo in params.yaml or a Prefect form is an error
rather than a silently ignored setting. :func:`load_config` turns pydantic's multi-line
``ValidationError`` into a :class:`ConfigError` whose message is one line naming the field,
the bad value and the allowed values.
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path
from typing import Any, Literal, TypeVar, get_args

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from speedbench.hostcheck.cpu import ENGINE_CPUS_ENV, format_cpu_list, parse_cpu_list

SpecMethod = Literal["none", "ngram", "draft_model", "eagle", "eagle3", "mtp", "suffix"]
EngineKind = Literal["vllm", "sglang", "trtllm", "llamacpp"]
LauncherKind = Literal["local", "docker", "external"]
DType = Literal["auto", "float32", "bfloat16", "float16"]
# What happens to the engine's prefix (KV block reuse) cache between levels.
PrefixCache = Literal["reset", "keep", "off"]
# How open-loop (request-rate) arrivals are spaced: see speedbench.client.arrivals.
ArrivalProcess = Literal["poisson", "gamma", "constant"]

SPEC_METHODS: tuple[str, ...] = get_args(SpecMethod)
ENGINE_KINDS: tuple[str, ...] = get_args(EngineKind)

# Methods whose drafter is a separate set of weights the user must name.
METHODS_NEEDING_DRAFT_MODEL = frozenset({"draft_model", "eagle", "eagle3"})
# Methods that draft from the prompt/output text itself and take no weights.
MODEL_FREE_METHODS = frozenset({"ngram", "suffix"})


class ConfigError(ValueError):
    """A configuration value is invalid. The message is a single line."""


class StrictModel(BaseModel):
    """Base for all config models: unknown keys are errors and instances are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)


class SpecConfig(StrictModel):
    """One speculative-decoding configuration (or none, for the baseline)."""

    method: SpecMethod = Field(
        default="none", description="Drafting method; 'none' is the autoregressive baseline."
    )
    draft_model: str | None = Field(
        default=None,
        description="Draft weights (HF id or local path) for draft_model, eagle and eagle3.",
    )
    num_speculative_tokens: int = Field(
        default=0, ge=0, le=32, description="Draft length k: tokens proposed per verification step."
    )
    prompt_lookup_min: int | None = Field(
        default=None, ge=1, le=64, description="ngram only: shortest n-gram to match."
    )
    prompt_lookup_max: int | None = Field(
        default=None, ge=1, le=64, description="ngram only: longest n-gram to match."
    )
    options: dict[str, Any] = Field(
        default_factory=dict,
        description="Further method options passed to the engine verbatim.",
    )

    @model_validator(mode="after")
    def _check_method_fields(self) -> SpecConfig:
        m = self.method
        if m == "none":
            if self.num_speculative_tokens != 0:
                raise ValueError("num_speculative_tokens must be 0 when method is 'none'")
            if self.draft_model is not None:
                raise ValueError("draft_model must be unset when method is 'none'")
            return self
        if self.num_speculative_tokens < 1:
            raise ValueError(f"num_speculative_tokens must be >= 1 for method '{m}'")
        if m in METHODS_NEEDING_DRAFT_MODEL and not self.draft_model:
            raise ValueError(f"draft_model is required for method '{m}'")
        if m in MODEL_FREE_METHODS and self.draft_model is not None:
            raise ValueError(f"draft_model must be unset for method '{m}', which drafts from text")
        if m != "ngram" and (self.prompt_lookup_min or self.prompt_lookup_max):
            raise ValueError("prompt_lookup_min/max apply to method 'ngram' only")
        lo, hi = self.prompt_lookup_min, self.prompt_lookup_max
        if lo is not None and hi is not None and lo > hi:
            raise ValueError(f"prompt_lookup_min ({lo}) must be <= prompt_lookup_max ({hi})")
        return self

    @property
    def is_speculative(self) -> bool:
        """Whether this configuration drafts at all."""
        return self.method != "none"

    @property
    def label(self) -> str:
        """Short human-readable name, e.g. ``ngram-k4`` or ``none``."""
        return "none" if self.method == "none" else f"{self.method}-k{self.num_speculative_tokens}"


class EngineConfig(StrictModel):
    """Where and how an inference engine serves the target model."""

    kind: EngineKind = Field(default="vllm", description="Inference engine.")
    model: str = Field(description="Target model: HF id or local path, as the engine sees it.")
    tokenizer: str | None = Field(
        default=None,
        description="Tokenizer path for speedbench's own tokenization (default: model).",
    )
    launcher: LauncherKind = Field(
        default="local",
        description="local: a process here; docker: a container; external: already running.",
    )
    host: str = Field(default="127.0.0.1", description="Address the server binds and we call.")
    port: int = Field(default=8000, ge=1, le=65535, description="Server port.")
    dtype: DType = Field(default="auto", description="Weight/activation dtype for the engine.")
    max_model_len: int | None = Field(default=None, ge=16, description="Engine context limit.")
    max_num_seqs: int | None = Field(default=None, ge=1, description="Engine batch limit.")
    python: str | None = Field(
        default=None, description="local only: interpreter of the engine's environment."
    )
    image: str | None = Field(
        default=None, description="docker only: image to run (default: the engine's spec)."
    )
    docker_host: str | None = Field(
        default=None,
        description="docker only: daemon to use, e.g. ssh://user@gpu-host (default: DOCKER_HOST "
        "or the local socket).",
    )
    gpus: str | None = Field(
        default=None,
        pattern=r"^(all|[1-9][0-9]*|device=[0-9A-Za-z-]+(,[0-9A-Za-z-]+)*)$",
        description="docker only: 'all', a count ('2') or 'device=0,1' (ids or UUIDs), as in "
        "`docker run --gpus`; unset on a CPU host.",
    )
    shm_size: str = Field(default="2g", description="docker only: /dev/shm size of the container.")
    cpus: str | None = Field(
        default_factory=lambda: os.environ.get(ENGINE_CPUS_ENV) or None,
        description="CPU cores the engine owns, as a Linux CPU list ('0', '0-3,8'): its process "
        "affinity and OpenMP threads (local), its cpuset (docker); the client keeps off them "
        f"where other cores are left. Default: ${ENGINE_CPUS_ENV}, else unbound.",
    )
    extra_args: list[str] = Field(default_factory=list, description="Extra engine CLI arguments.")
    env: dict[str, str] = Field(default_factory=dict, description="Extra engine environment.")
    startup_timeout_s: float = Field(default=900.0, gt=0, description="Health wait limit.")
    prefix_cache: PrefixCache = Field(
        default="reset",
        description="reset: emptied before every level, so no level's prefill is served from "
        "an earlier one's cache; keep: the engine's default, shared across levels; off: "
        "disabled at launch.",
    )

    @field_validator("cpus")
    @classmethod
    def _normal_cpu_list(cls, value: str | None) -> str | None:
        return None if value is None else format_cpu_list(parse_cpu_list(value))

    @property
    def base_url(self) -> str:
        """HTTP root of the engine's server."""
        return f"http://{self.host}:{self.port}"

    @property
    def cpu_ids(self) -> tuple[int, ...]:
        """The engine's cores as ids (empty when unbound)."""
        return parse_cpu_list(self.cpus) if self.cpus else ()


SplitName = Literal[
    "qualitative",
    "mtbench",
    "throughput_1k",
    "throughput_2k",
    "throughput_8k",
    "throughput_16k",
    "throughput_32k",
    "throughput_1k_random",
    "throughput_2k_random",
    "throughput_8k_random",
    "throughput_16k_random",
    "throughput_32k_random",
]
SPLIT_NAMES: tuple[str, ...] = get_args(SplitName)


class SweepConfig(StrictModel):
    """A sweep: SD methods x draft lengths x batch sizes x splits on one target model.

    This is the parameter form of the ``sweep`` flow; every field shows in the Prefect UI with
    its description. One engine is launched per SD configuration and reused for all batch sizes
    and splits; a no-SD baseline is measured too (unless ``baseline`` is false) so that speedup
    is defined.
    """

    name: str = Field(default="sweep", min_length=1, description="Name of the MLflow parent run.")
    model: str = Field(
        default="qwen2.5-coder-1.5b-instruct",
        description="Target: a packaged model name, a local HF directory or a hub id.",
    )
    draft_model: str | None = Field(
        default=None, description="Draft weights for draft_model/eagle/eagle3 (name, path or id)."
    )
    tokenizer: str | None = Field(
        default=None,
        description="The target's tokenizer on this machine, which tokenizes every prompt: a "
        "packaged name, local folder or hub id; unset: the model's own (set it when the model "
        "is a path on the engine's host only).",
    )
    methods: list[SpecMethod] = Field(
        default=["none"], min_length=1, description="SD methods to measure."
    )
    draft_lengths: list[int] = Field(
        default=[], description="Draft lengths k to sweep for every SD method."
    )
    batch_sizes: list[int] = Field(
        default=[1],
        description="Closed loop: concurrent streams to sweep, each stream sending its next "
        "request when its last one ends (SPEED-Bench's batch-size axis).",
    )
    request_rates: list[float] = Field(
        default=[],
        description="Open loop: request rates (requests/s) to sweep; requests arrive on a "
        "seeded schedule whatever the server answers, and latency counts from the due time.",
    )
    rate_sweep: int = Field(
        default=0,
        ge=0,
        le=64,
        description="Open loop, as GuideLLM's sweep: this many rates evenly spaced strictly "
        "between the baseline's request throughput at the smallest and at the largest batch "
        "size (needs the baseline and two batch sizes), per split.",
    )
    arrival: ArrivalProcess = Field(
        default="poisson",
        description="Open loop: how arrivals are spaced (poisson; gamma with burstiness; "
        "constant gaps).",
    )
    burstiness: float = Field(
        default=1.0,
        gt=0,
        description="Open loop, gamma arrivals: the shape; < 1 burstier than Poisson, > 1 "
        "more even (1 is Poisson).",
    )
    max_concurrency: int | None = Field(
        default=None,
        ge=1,
        description="Open loop: at most this many requests in flight; a request that waits "
        "for a slot counts the wait in its latency. None: no cap.",
    )
    warmup_requests: int = Field(
        default=0,
        ge=0,
        description="Requests sent before each level at the level's own load shape, kept in "
        "the records (marked warmup) and left out of every metric.",
    )
    repeats: int = Field(
        default=1,
        ge=1,
        le=100,
        description="Measure each level this many times (same prompts, a fresh order and "
        "arrival schedule per repeat); metrics get a confidence interval across repeats.",
    )
    slo_ttft_s: float | None = Field(
        default=None, gt=0, description="Goodput objective: time to first token (s)."
    )
    slo_tpot_s: float | None = Field(
        default=None, gt=0, description="Goodput objective: time per output token (s)."
    )
    slo_e2e_s: float | None = Field(
        default=None, gt=0, description="Goodput objective: end-to-end latency (s)."
    )
    splits: list[SplitName] = Field(
        default=["qualitative"], min_length=1, description="Splits to run."
    )
    prompt_file: str | None = Field(
        default=None,
        description="Your own JSONL or Parquet prompt set, measured as a split named after the "
        "file (instead of splits).",
    )
    categories: list[str] | None = Field(
        default=None, description="Only these categories of each split (None: all)."
    )
    per_category: int | None = Field(
        default=None, ge=1, description="Use the first N prompts of each category (None: all)."
    )
    per_category_by_batch_size: dict[int, int] = Field(
        default={},
        description="Closed loop: batch size -> prompts per category at that batch size "
        "(others use per_category). More questions where batching makes them cheap: "
        "{16: 5} (on the command line 16=5) puts the per-category acceptance of the bs-16 levels "
        "on 5 questions each.",
    )
    limit: int | None = Field(default=None, ge=1, description="At most N prompts per split.")
    multiturn: bool = Field(default=False, description="Send every turn of multi-turn prompts.")
    output_len: int = Field(
        default=96, ge=1, le=65536, description="Tokens generated a request (the cap, at EOS)."
    )
    stop_at_eos: bool = Field(
        default=False,
        description="SPEED-Bench's protocol: a request ends when the model ends its answer (EOS), "
        "up to output_len tokens. Off: ignore_eos, every request exactly output_len tokens, as "
        "serving benchmarks do.",
    )
    prefix_cache: PrefixCache = Field(
        default="reset",
        description="Engine prefix cache: reset before every level, keep (engine default) or off.",
    )
    max_num_seqs: int | None = Field(
        default=None,
        ge=1,
        description="The engine's limit on requests running at once (vLLM --max-num-seqs, "
        "SGLang --max-running-requests, TensorRT-LLM max_batch_size); unset: the engine's own, "
        "which for SGLang with SD is 48. A batch size above it is refused before launch.",
    )
    temperature: float = Field(default=0.0, ge=0.0, le=2.0, description="Sampling temperature.")
    seed: int = Field(default=0, description="Seed for sampling and prompt order.")
    client_workers: int = Field(
        default=0,
        ge=0,
        le=64,
        description="Load-generator processes; 0 picks one per 256 streams, leaving a core free.",
    )
    request_timeout_s: float = Field(
        default=1800.0, gt=0, description="Limit on one request, first byte to finish."
    )
    baseline: bool = Field(
        default=True,
        description="Measure the no-SD baseline too (one more engine launch): speedup and the "
        "lossless check need it. Off for an acceptance-only sweep.",
    )
    draft_cost: bool = Field(
        default=False,
        description="Also time the draft model alone (no SD) at every batch size, so the report "
        "can show the break-even model: expected speedup AL / (1 + k c) beside the measured one.",
    )
    oracle: list[Literal["draft_model", "ngram"]] = Field(
        default=[],
        description="Greedy acceptance oracle: replay a baseline level's answers under these "
        "drafters (draft_model: one teacher-forced pass of draft_model; ngram: vLLM's prompt "
        "lookup) and predict acceptance for every k = 1..oracle_max_k, per category, with no "
        "engine run per k. Greedy sweeps (temperature 0) only.",
    )
    oracle_max_k: int = Field(
        default=6, ge=1, le=16, description="Oracle: predict draft lengths 1..oracle_max_k."
    )
    oracle_per_category: int | None = Field(
        default=None,
        ge=1,
        description="Oracle: measure its own baseline level (one more launch of the target, no "
        "SD) on this many prompts per category at oracle_batch_size, so its per-category "
        "figures rest on more questions than the SD levels; unset: replay the sweep's own "
        "baseline levels.",
    )
    oracle_batch_size: int | None = Field(
        default=None,
        ge=1,
        description="Oracle: the batch size of its own baseline level (default: the largest "
        "of batch_sizes).",
    )
    contention_threshold: float = Field(
        default=0.10,
        gt=0,
        le=1,
        description="Flag a level when other processes used more than this fraction of the "
        "host's cores during it.",
    )
    strict_host: bool = Field(
        default=False,
        description="Refuse to measure a level while other processes use the host (a 2 s probe "
        "before each level) instead of flagging it afterwards.",
    )
    engine: EngineKind = Field(default="vllm", description="Inference engine.")
    launcher: LauncherKind = Field(
        default="local", description="local process, docker container, or an external server."
    )
    image: str | None = Field(
        default=None,
        description="docker: engine image (default: the engine's public image; "
        "speedbench/vllm-cpu:0.32.0 is the CPU one containers/build.sh makes).",
    )
    docker_host: str | None = Field(
        default=None, description="docker: daemon, e.g. ssh://user@gpu-host (default: local)."
    )
    gpus: str | None = Field(
        default=None,
        pattern=r"^(all|[1-9][0-9]*|device=[0-9A-Za-z-]+(,[0-9A-Za-z-]+)*)$",
        description="docker: 'all', a count or 'device=0,1'. Unset: vLLM gets its CPU settings.",
    )
    host: str = Field(default="127.0.0.1", description="Engine address (bind and call).")
    port: int = Field(default=8000, ge=1, le=65535, description="Engine port.")
    dtype: DType = Field(default="auto", description="Weights dtype (auto: bf16 where native).")
    data_dir: str = Field(default="data", description="Where the built splits are.")
    out_dir: str = Field(default="results/sweeps", description="Where records and plots go.")
    tracking_uri: str | None = Field(
        default=None,
        description="MLflow tracking URI (default: $MLFLOW_TRACKING_URI, else a SQLite file in "
        "the project).",
    )
    experiment: str = Field(default="speedbench", description="MLflow experiment name.")
    force: bool = Field(default=False, description="Re-run configurations that already completed.")

    @model_validator(mode="after")
    def _check_grid(self) -> SweepConfig:
        if self.prompt_file is not None and "splits" in self.model_fields_set:
            raise ValueError("give splits or prompt_file, not both")
        for name in ("draft_lengths", "batch_sizes"):
            values = getattr(self, name)
            bad = [v for v in values if v < 1]
            if bad:
                raise ValueError(f"{name} must all be >= 1, got {bad}")
            if len(set(values)) != len(values):
                raise ValueError(f"{name} has duplicates: {values}")
        self._check_load_shape()
        self._check_per_category_by_batch_size()
        for name in ("methods", "splits"):
            values = getattr(self, name)
            if len(set(values)) != len(values):
                raise ValueError(f"{name} has duplicates: {values}")
        speculative = [m for m in self.methods if m != "none"]
        if not self.baseline and ("none" in self.methods or not speculative):
            raise ValueError(
                "baseline is false but methods include none (or only none): measure the "
                "baseline, or list SD methods only"
            )
        if not speculative and self.draft_lengths:
            raise ValueError(
                f"draft_lengths {self.draft_lengths} given but no SD method is selected; "
                "add a method or drop draft_lengths"
            )
        if speculative and not self.draft_lengths:
            raise ValueError(f"draft_lengths is required for SD methods {speculative}")
        self._check_oracle()
        if any(m in METHODS_NEEDING_DRAFT_MODEL for m in self.methods) and not self.draft_model:
            raise ValueError("draft_model is required when methods include a model-based drafter")
        return self

    def _check_oracle(self) -> None:
        if not self.oracle:
            if self.oracle_per_category is not None or self.oracle_batch_size is not None:
                raise ValueError("oracle_per_category/oracle_batch_size set but oracle is empty")
            return
        if len(set(self.oracle)) != len(self.oracle):
            raise ValueError(f"oracle has duplicates: {self.oracle}")
        if self.temperature != 0:
            raise ValueError(
                f"the oracle predicts greedy SD only; temperature is {self.temperature}"
            )
        if not self.baseline:
            raise ValueError("the oracle replays the no-SD baseline: baseline must be true")
        if "draft_model" in self.oracle and not self.draft_model:
            raise ValueError("oracle draft_model needs draft_model (the draft's weights)")
        if not self.batch_sizes and self.oracle_per_category is None:
            raise ValueError(
                "the oracle replays a closed-loop baseline level: give batch_sizes or "
                "oracle_per_category"
            )

    def _check_load_shape(self) -> None:
        rates = self.request_rates
        bad = [r for r in rates if not 0 < r < float("inf")]
        if bad:
            raise ValueError(f"request_rates must all be finite and > 0 requests/s, got {bad}")
        if len(set(rates)) != len(rates):
            raise ValueError(f"request_rates has duplicates: {rates}")
        if not (self.batch_sizes or rates or self.rate_sweep):
            raise ValueError("no load level: give batch_sizes, request_rates or rate_sweep")
        if self.rate_sweep and (len(self.batch_sizes) < 2 or not self.baseline):
            raise ValueError(
                "rate_sweep places rates between the baseline's throughput at the smallest and "
                "the largest batch size: it needs the baseline and at least two batch_sizes"
            )
        open_loop = bool(rates or self.rate_sweep)
        if not open_loop:
            # By value, not by what was given: the Prefect form and a dumped config send every
            # field, defaults included.
            defaults = {"max_concurrency": None, "arrival": "poisson", "burstiness": 1.0}
            set_here = [name for name, value in defaults.items() if getattr(self, name) != value]
            if set_here:
                raise ValueError(
                    f"{', '.join(set_here)} apply to open-loop levels only; give "
                    "request_rates or rate_sweep"
                )
        if open_loop and self.client_workers > 1:
            raise ValueError(
                "an open-loop level runs in one client process (its schedule is one clock's): "
                f"client_workers must be 0 or 1, got {self.client_workers}"
            )
        if self.burstiness != 1.0 and self.arrival != "gamma":
            raise ValueError(f"burstiness applies to gamma arrivals only, not {self.arrival}")

    def _check_per_category_by_batch_size(self) -> None:
        extra = sorted(set(self.per_category_by_batch_size) - set(self.batch_sizes))
        if extra:
            raise ValueError(
                f"per_category_by_batch_size names batch sizes {extra} that batch_sizes "
                f"{self.batch_sizes} does not sweep"
            )
        bad = {bs: n for bs, n in self.per_category_by_batch_size.items() if n < 1}
        if bad:
            raise ValueError(
                f"per_category_by_batch_size: prompts per category must be >= 1, got {bad}"
            )

    def prompts_per_category(
        self, batch_size: int, request_rate: float | None = None
    ) -> int | None:
        """Prompts per category at one load point (None: all); open-loop levels use per_category."""
        if request_rate is not None:
            return self.per_category
        return self.per_category_by_batch_size.get(batch_size, self.per_category)

    @property
    def selected_per_category(self) -> int | None:
        """Prompts per category the sweep loads: the most any of its levels uses (None: all)."""
        if self.per_category is None:
            return None
        oracle = [self.oracle_per_category] if self.oracle and self.oracle_per_category else []
        return max([self.per_category, *self.per_category_by_batch_size.values(), *oracle])

    @property
    def objectives(self) -> dict[str, float]:
        """The goodput objectives that are set, by name (``ttft_s``, ``tpot_s``, ``e2e_s``)."""
        slos = {"ttft_s": self.slo_ttft_s, "tpot_s": self.slo_tpot_s, "e2e_s": self.slo_e2e_s}
        return {name: bound for name, bound in slos.items() if bound is not None}

    @property
    def split_names(self) -> list[str]:
        """The splits measured: ``splits``, or the prompt file's name."""
        return [Path(self.prompt_file).stem] if self.prompt_file else list(self.splits)

    def spec_configs(self) -> list[SpecConfig]:
        """Expand methods x draft lengths into SpecConfigs; 'none' appears once.

        The no-SD baseline comes first, whether or not ``methods`` lists it, so every SD point
        has a speedup; ``baseline: false`` leaves it out.
        """
        specs = [SpecConfig()] if self.baseline else []
        for method, k in itertools.product(self.methods, self.draft_lengths):
            if method == "none":
                continue
            draft = self.draft_model if method in METHODS_NEEDING_DRAFT_MODEL else None
            specs.append(SpecConfig(method=method, num_speculative_tokens=k, draft_model=draft))
        return specs


ModelT = TypeVar("ModelT", bound=BaseModel)


def format_validation_error(model: type[BaseModel], exc: ValidationError) -> str:
    """Render the first error of ``exc`` as one line: ``Model.field: problem (got X)``."""
    err = exc.errors(include_url=False)[0]
    loc = ".".join(str(p) for p in err["loc"])
    msg = err["msg"].replace("\n", " ")
    if err["type"] == "literal_error":
        allowed = err.get("ctx", {}).get("expected", "")
        msg = f"got {err['input']!r}; allowed: {allowed}"
    elif err["type"] == "extra_forbidden":
        fields = ", ".join(model.model_fields) if not err["loc"][:-1] else "see the model's fields"
        msg = f"unknown field; allowed fields: {fields}"
    elif err["type"] == "missing":
        msg = "required field is missing"
    elif "input" in err and err["type"] != "value_error":
        msg = f"{msg} (got {err['input']!r})"
    elif err["type"] == "value_error":
        msg = msg.removeprefix("Value error, ")
    more = len(exc.errors()) - 1
    suffix = f" (+{more} more error{'s' if more > 1 else ''})" if more else ""
    where = f"{model.__name__}.{loc}" if loc else model.__name__
    return f"{where}: {msg}{suffix}"


def load_config(model: type[ModelT], data: Any) -> ModelT:
    """Validate ``data`` as ``model``, raising :class:`ConfigError` with a one-line message."""
    if isinstance(model, type) and isinstance(data, model):
        return data
    if data is not None and not isinstance(data, dict):
        raise ConfigError(f"{model.__name__}: expected a mapping, got {type(data).__name__}")
    try:
        return model.model_validate(data or {})
    except ValidationError as exc:
        raise ConfigError(format_validation_error(model, exc)) from None


def load_params(path: str | Path) -> dict[str, Any]:
    """Read a params.yaml file into a dict, with a one-line error for malformed YAML."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"params file not found: {path}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise ConfigError(f"{path}: malformed YAML{where}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level must be a mapping")
    return data


def read_config_file(path: str | Path) -> dict[str, Any]:
    """A YAML or JSON file of config fields, with a one-line error when it cannot be read."""
    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        detail = " ".join(str(exc).split())
        raise ConfigError(f"{path}: cannot read a config file ({detail})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level must be a mapping of config fields")
    return data
