"""Typed configuration for engines, speculative decoding and sweeps.

Every model forbids unknown fields, so a typo in params.yaml or a Prefect form is an error
rather than a silently ignored setting. :func:`load_config` turns pydantic's multi-line
``ValidationError`` into a :class:`ConfigError` whose message is one line naming the field,
the bad value and the allowed values.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar, get_args

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    field_validator,
    model_validator,
)

from speedbench.hostcheck.cpu import ENGINE_CPUS_ENV, format_cpu_list, parse_cpu_list

SpecMethod = Literal["none", "ngram", "draft_model", "eagle", "eagle3", "mtp", "suffix"]
EngineKind = Literal["vllm", "sglang", "trtllm", "llamacpp"]
LauncherKind = Literal["local", "docker", "external"]
DType = Literal["auto", "float32", "bfloat16", "float16"]
# What happens to the engine's prefix (KV block reuse) cache between levels.
PrefixCache = Literal["reset", "keep", "off"]
# How open-loop (request-rate) arrivals are spaced: see speedbench.client.arrivals.
ArrivalProcess = Literal["poisson", "gamma", "constant"]
# How a grid point's configs share the host's time: see speedbench.run.interleave.
Interleave = Literal["off", "resident", "relaunch"]

SPEC_METHODS: tuple[str, ...] = get_args(SpecMethod)
ENGINE_KINDS: tuple[str, ...] = get_args(EngineKind)

# Methods whose drafter is a separate set of weights the user must name.
METHODS_NEEDING_DRAFT_MODEL = frozenset({"draft_model", "eagle", "eagle3"})
# Methods whose drafter is a head over the target's own hidden states.
EAGLE_METHODS = frozenset({"eagle", "eagle3"})
# Methods that draft from the prompt/output text itself and take no weights.
MODEL_FREE_METHODS = frozenset({"ngram", "suffix"})


# Environment variable names a sweep passes to its engine by name (HF_TOKEN and the like).
ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"
PASS_ENV_HELP = (
    "Environment variables the engine gets by name (e.g. HF_TOKEN for a gated hub model): "
    "their values are read from speedbench's own environment at launch and written nowhere "
    "(not in params, results, MLflow or logs)."
)
# A static draft tree for the oracle: breadth per depth (speedbench.oracle.variants).
TREE_SHAPE = r"^[1-9][0-9]*(x[1-9][0-9]*)*$"

# docker only: what the engine's own `docker run` line asks of the host (engines/containers.py
# HostSettings); each is overridable in an engine config or a sweep's form.
IpcMode = Literal["host", "private"]
UlimitName = Literal["memlock", "stack", "nofile", "core"]
SHM_SIZE = r"^[1-9][0-9]*[bkmg]?$"
IPC_HELP = (
    "docker: IPC namespace, host (the host's shared memory) or private; unset: the engine's "
    "own run line's (host for vLLM, SGLang and TensorRT-LLM on GPUs)."
)
SHM_HELP = "docker: /dev/shm size under a private IPC namespace, e.g. 16g; unset: the engine's."
ULIMITS_HELP = (
    "docker: ulimits, name -> limit (-1 unlimited), e.g. {memlock: -1}; unset: the engine's "
    "(TensorRT-LLM: memlock -1, stack 67108864)."
)
MODEL_CACHE_HELP = (
    "docker: a folder on the engine's host mounted as every container's Hugging Face cache "
    "(HF_HOME), so models named by hub id download once for the whole sweep."
)


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
    variant: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$",
        description="Which of several drafters of one method this is (an EAGLE-3 head's name); "
        "it enters the label: eagle3-<variant>-k3.",
    )

    @model_validator(mode="after")
    def _check_method_fields(self) -> SpecConfig:
        m = self.method
        if m == "none":
            if self.num_speculative_tokens != 0:
                raise ValueError("num_speculative_tokens must be 0 when method is 'none'")
            if self.draft_model is not None:
                raise ValueError("draft_model must be unset when method is 'none'")
            if self.variant is not None:
                raise ValueError("variant names a drafter: unset when method is 'none'")
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
        if self.method == "none":
            return "none"
        variant = f"-{self.variant}" if self.variant else ""
        return f"{self.method}{variant}-k{self.num_speculative_tokens}"


class EngineSettings(StrictModel):
    """Which engine serves the target, where, and how its host is set up.

    The sweep form's ``engine`` section is exactly this model; :class:`EngineConfig` adds what a
    launch also needs (the model as the engine sees it, the interpreter, the cores, extra
    arguments), filled in by :func:`speedbench.run.plan.engine_config`.
    """

    kind: EngineKind = Field(default="vllm", description="Inference engine.")
    launcher: LauncherKind = Field(
        default="local",
        description="local: a process here; docker: a container; external: already running.",
    )
    image: str | None = Field(
        default=None,
        description="docker: engine image (default: the engine's public image; "
        "speedbench/vllm-cpu:0.32.0 is the CPU one containers/build.sh makes). Its tag names "
        "the engine release whose flags the launch uses.",
    )
    docker_host: str | None = Field(
        default=None,
        description="docker: daemon to use, e.g. ssh://user@gpu-host (default: DOCKER_HOST "
        "or the local socket).",
    )
    gpus: str | None = Field(
        default=None,
        pattern=r"^(all|[1-9][0-9]*|device=[0-9A-Za-z-]+(,[0-9A-Za-z-]+)*)$",
        description="docker: 'all', a count ('2') or 'device=0,1' (ids or UUIDs), as in "
        "`docker run --gpus`. Unset: a CPU host (vLLM gets its CPU settings).",
    )
    host: str = Field(default="127.0.0.1", description="Address the server binds and we call.")
    port: int = Field(default=8000, ge=1, le=65535, description="Server port.")
    dtype: DType = Field(default="auto", description="Weights dtype (auto: bf16 where native).")
    max_num_seqs: int | None = Field(
        default=None,
        ge=1,
        description="The engine's limit on requests running at once (vLLM --max-num-seqs, "
        "SGLang --max-running-requests, TensorRT-LLM max_batch_size); unset: the engine's own, "
        "which for SGLang with SD is 48. A batch size above it is refused before launch.",
    )
    prefix_cache: PrefixCache = Field(
        default="reset",
        description="reset: emptied before every level, so no level's prefill is served from "
        "an earlier one's cache; keep: the engine's default, shared across levels; off: "
        "disabled at launch.",
    )
    pass_env: list[Annotated[str, StringConstraints(pattern=ENV_NAME)]] = Field(
        default_factory=list, description=PASS_ENV_HELP
    )
    model_cache: str | None = Field(default=None, description=MODEL_CACHE_HELP)
    ipc: IpcMode | None = Field(default=None, description=IPC_HELP)
    shm_size: str | None = Field(default=None, pattern=SHM_SIZE, description=SHM_HELP)
    ulimits: dict[UlimitName, int] | None = Field(default=None, description=ULIMITS_HELP)


class EngineConfig(EngineSettings):
    """Where and how an inference engine serves the target model: a launch's whole config."""

    model: str = Field(description="Target model: HF id or local path, as the engine sees it.")
    tokenizer: str | None = Field(
        default=None,
        description="Tokenizer path for speedbench's own tokenization (default: model).",
    )
    max_model_len: int | None = Field(default=None, ge=16, description="Engine context limit.")
    python: str | None = Field(
        default=None, description="local only: interpreter of the engine's environment."
    )
    cpus: str | None = Field(
        default_factory=lambda: os.environ.get(ENGINE_CPUS_ENV) or None,
        description="CPU cores the engine owns, as a Linux CPU list ('0', '0-3,8'): its process "
        "affinity and OpenMP threads (local), its cpuset (docker); the client keeps off them "
        f"where other cores are left. Default: ${ENGINE_CPUS_ENV}, else unbound.",
    )
    extra_args: list[str] = Field(default_factory=list, description="Extra engine CLI arguments.")
    env: dict[str, str] = Field(default_factory=dict, description="Extra engine environment.")
    startup_timeout_s: float = Field(default=900.0, gt=0, description="Health wait limit.")

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
    # SPEED-Bench's own configs, from local files (PromptsSection.speed_bench_dir) or the hub.
    "speed_bench_qualitative",
    "speed_bench_throughput_1k",
    "speed_bench_throughput_2k",
    "speed_bench_throughput_8k",
    "speed_bench_throughput_16k",
    "speed_bench_throughput_32k",
]


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
        msg = f"unknown field; allowed fields: {', '.join(_allowed_fields(model, err['loc'][:-1]))}"
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


def _allowed_fields(model: type[BaseModel], parent: tuple[int | str, ...]) -> list[str]:
    """The field names a mapping at ``parent`` inside ``model`` takes (flat names at the top)."""
    if not parent:
        flat_fields = getattr(model, "flat_fields", None)
        return list(flat_fields() if flat_fields else model.model_fields)
    for step in parent:
        field = model.model_fields.get(str(step))
        inner = field.annotation if field else None
        if not (isinstance(inner, type) and issubclass(inner, BaseModel)):
            return ["see the model's fields"]
        model = inner
    return list(model.model_fields)


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
