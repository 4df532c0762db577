"""Check speedbench's launch arguments and request bodies with an engine's own code.

Runs *inside an engine's environment* (``.venv-engine`` for vLLM 0.32, ``.venv-vllm-0.33``,
``.venv-sglang``), never in speedbench's: it imports the engine, not speedbench. It reads cases
as JSON on stdin and writes verdicts as JSON on stdout:

    {"cases": [{"name": "ngram-k3", "argv": [...], "bodies": [{...}, ...]}]}

For each case the engine's own command-line parser parses ``argv`` (vLLM: the ``vllm serve``
subcommand's parser and its ``validate``; SGLang: ``ServerArgs.add_cli_args``, without
constructing ``ServerArgs``, whose post-init probes devices; an adaptive speculative
config is loaded by ``AdaptiveSpeculativeParams``, which reports each batch size's draft
steps), and its own request models validate each body (vLLM: ``CompletionRequest``, whose
unknown fields vLLM only logs and ignores, so they are reported here as errors; SGLang:
``GenerateReqInput`` and ``SamplingParams``, dataclasses that refuse unknown fields). vLLM's
speculative config is checked against the fields of its ``SpeculativeConfig`` dataclass and
its method names.

    .venv-engine/bin/python scripts/engine_contract.py vllm < cases.json
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.abc
import importlib.machinery
import io
import json
import sys
import types
import typing
from collections.abc import Callable
from typing import Any


def parse_with(parse: Callable[[], Any]) -> tuple[Any, str | None]:
    """Run an argparse parse; (namespace, None) or (None, the parser's own error text)."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            return parse(), None
    except SystemExit:
        lines = [line for line in err.getvalue().splitlines() if line.strip()]
        return None, (lines[-1] if lines else "rejected")
    except Exception as exc:  # the engine's own validation, raised as it raises it
        return None, f"{type(exc).__name__}: {exc}"


def literal_values(annotation: Any) -> set[str]:
    """Every string of the Literal types inside ``annotation`` (unions and aliases opened)."""
    out: set[str] = set()
    stack = [annotation]
    while stack:
        tp = stack.pop()
        if typing.get_origin(tp) is typing.Literal:
            out.update(v for v in typing.get_args(tp) if isinstance(v, str))
        else:
            stack.extend(typing.get_args(tp))
            value = getattr(tp, "__value__", None)  # a `type X = ...` alias
            if value is not None:
                stack.append(value)
    return out


class VLLM:
    """vLLM's ``vllm serve`` parser, CompletionRequest and SpeculativeConfig."""

    def __init__(self) -> None:
        import vllm
        import vllm.entrypoints.cli.serve as serve
        from vllm.config import SpeculativeConfig
        from vllm.utils.argparse_utils import FlexibleArgumentParser

        try:
            from vllm.entrypoints.openai.completion.protocol import CompletionRequest
        except ImportError:
            from vllm.entrypoints.openai.protocol import CompletionRequest

        self.version = vllm.__version__
        self.parser = FlexibleArgumentParser(prog="vllm")
        subparsers = self.parser.add_subparsers(dest="subparser")
        (self.serve,) = [c for c in serve.cmd_init() if c.name == "serve"]
        self.serve.subparser_init(subparsers)
        self.request = CompletionRequest
        self.request_fields = set(CompletionRequest.model_fields) | {
            f.alias for f in CompletionRequest.model_fields.values() if f.alias
        }
        self.spec_fields = {f.name for f in dataclasses.fields(SpeculativeConfig)}
        hints = typing.get_type_hints(SpeculativeConfig)
        self.spec_methods = literal_values(hints["method"])
        self.defaults = {"max_num_batched_tokens": self.token_budget()}

    @staticmethod
    def token_budget() -> int | None:
        """Its default tokens per iteration for the OpenAI server, where this is a CPU build."""
        from vllm.engine.arg_utils import EngineArgs
        from vllm.platforms import current_platform
        from vllm.usage.usage_lib import UsageContext

        if not current_platform.is_cpu():
            return None  # on a GPU it depends on the device's memory
        return EngineArgs.get_batch_defaults(1)[0][UsageContext.OPENAI_API_SERVER]

    def check_argv(self, argv: list[str]) -> str | None:
        """None if ``vllm serve`` parses and validates ``argv``, else its error."""

        def parse() -> Any:
            args = self.parser.parse_args(["serve", *argv])
            self.serve.validate(args)
            return args

        args, error = parse_with(parse)
        if error:
            return error
        spec = args.speculative_config
        if spec:
            unknown = sorted(set(spec) - self.spec_fields)
            if unknown:
                return f"SpeculativeConfig has no field(s) {unknown}"
            if spec.get("method") not in self.spec_methods:
                return f"SpeculativeConfig.method {spec.get('method')!r} not in its methods"
            if "num_speculative_tokens_per_batch_size" in spec:
                return self.check_schedule(spec, args.max_num_seqs)
        return None

    def check_schedule(self, spec: dict[str, Any], max_num_seqs: int | None) -> str | None:
        """None if vLLM's own dynamic-SD code takes the batch-size schedule, else its error.

        The scheduler expands it with ``build_dynamic_sd_schedule_lookup`` (which validates it
        first) against the server's batch limit and ``num_speculative_tokens``.
        """
        try:
            from vllm.v1.spec_decode.dynamic.utils import build_dynamic_sd_schedule_lookup
        except ImportError as exc:
            return f"this vLLM has no dynamic speculative decoding ({exc})"
        schedule = spec["num_speculative_tokens_per_batch_size"]
        _, error = parse_with(
            lambda: build_dynamic_sd_schedule_lookup(
                schedule, max_num_seqs or 256, spec["num_speculative_tokens"]
            )
        )
        return error

    def check_body(self, body: dict[str, Any]) -> str | None:
        """None if CompletionRequest takes ``body`` with no field it would ignore."""
        unknown = sorted(set(body) - self.request_fields)
        if unknown:
            return f"CompletionRequest ignores unknown field(s) {unknown}"
        _, error = parse_with(lambda: self.request.model_validate(body))
        return error


class _Stubbed:
    """Any attribute of a stubbed torchvision: importable, never usable."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Stubbed(f"{self._name}.{attr}")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"{self._name}: torchvision is stubbed in this contract environment")

    def __mro_entries__(self, bases: tuple[Any, ...]) -> tuple[type, ...]:
        return (object,)


class _TorchvisionStub(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """``import torchvision`` where it cannot load, for SGLang >= 0.5.10's request models.

    Those import SGLang's model configs, whose multimodal utilities import torchvision at
    module level.
    PyPI's torchvision wheels are CUDA builds whose operators do not register against the
    engine environment's CPU torch (``operator torchvision::nms does not exist``), and the CPU
    wheels live on PyTorch's own index, which these hosts cannot reach. Nothing the checks call
    (the argument parser, ``GenerateReqInput``, ``SamplingParams``) uses torchvision: a call
    into the stub raises, so a check that did would fail, not pass.
    """

    VERSION = "0.28.0"  # the release built for torch 2.13, which transformers compares against

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name == "torchvision" or name.startswith("torchvision."):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec: Any) -> types.ModuleType:
        module = types.ModuleType(spec.name)
        module.__path__ = []
        module.__version__ = self.VERSION  # type: ignore[attr-defined]

        def attribute(attr: str, name: str = spec.name) -> Any:
            if attr.startswith("__"):
                raise AttributeError(attr)
            return _Stubbed(f"{name}.{attr}")

        module.__getattr__ = attribute  # type: ignore[method-assign]
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        return None


def stub_torchvision_if_absent() -> bool:
    """Put the stub in place where torchvision does not import; True if it was needed."""
    try:
        import torchvision  # noqa: F401
    except Exception:
        for name in [m for m in sys.modules if m.split(".")[0] == "torchvision"]:
            del sys.modules[name]
        sys.meta_path.insert(0, _TorchvisionStub())
        return True
    return False


class SGLang:
    """SGLang's ServerArgs parser, GenerateReqInput and SamplingParams."""

    def __init__(self) -> None:
        self.stubbed = ["torchvision"] if stub_torchvision_if_absent() else []
        import sglang
        from sglang.srt.managers.io_struct import GenerateReqInput
        from sglang.srt.sampling.sampling_params import SamplingParams
        from sglang.srt.server_args import ServerArgs

        self.version = sglang.__version__
        self.parser = argparse.ArgumentParser(prog="sglang.launch_server")
        ServerArgs.add_cli_args(self.parser)
        self.request, self.sampling = GenerateReqInput, SamplingParams

    def check_argv(self, argv: list[str]) -> str | None:
        """None if SGLang's parser takes ``argv``, else its error."""
        return parse_with(lambda: self.parser.parse_args(argv))[1]

    def adaptive_steps(self, argv: list[str], config: Any, batch_sizes: int) -> Any:
        """The draft steps SGLang's adaptive params give batch sizes 1..``batch_sizes``.

        ``config`` is written where ``argv``'s ``--speculative-adaptive-config`` points and
        loaded by ``AdaptiveSpeculativeParams`` from the parsed ``--speculative-num-steps``;
        a list of steps, or the error (the parser's, or the loader's own validation).
        """
        import tempfile

        try:
            from sglang.srt.speculative.adaptive_spec_params import AdaptiveSpeculativeParams
        except ImportError as exc:
            return f"this SGLang has no adaptive speculative decoding ({exc})"
        with tempfile.TemporaryDirectory() as tmp:
            path = f"{tmp}/adaptive.json"
            with open(path, "w") as f:
                json.dump(config, f)
            at = argv.index("--speculative-adaptive-config") + 1
            args, error = parse_with(
                lambda: self.parser.parse_args([*argv[:at], path, *argv[at + 1 :]])
            )
            if error:
                return error
            if not args.speculative_adaptive:
                return "--speculative-adaptive not set"
            params, error = parse_with(
                lambda: AdaptiveSpeculativeParams(args.speculative_num_steps, path)
            )
        if error:
            return error
        return [params.get_steps_for_batch(b) for b in range(1, batch_sizes + 1)]

    def check_body(self, body: dict[str, Any]) -> str | None:
        """None if GenerateReqInput and SamplingParams take ``body``, else their error."""

        def build() -> Any:
            req = self.request(**body)
            req.normalize_batch_and_arguments()
            params = self.sampling(**(body.get("sampling_params") or {}))
            params.normalize(None)
            params.verify(151936)
            return req

        return parse_with(build)[1]


ENGINES: dict[str, type[VLLM] | type[SGLang]] = {"vllm": VLLM, "sglang": SGLang}
MARKER = "speedbench-contract: "


def main() -> None:
    """Verdicts for the cases on stdin."""
    engine = ENGINES[sys.argv[1]]()
    cases = json.load(sys.stdin)["cases"]
    results = []
    for case in cases:
        results.append(
            {
                "name": case["name"],
                "argv_error": engine.check_argv(case["argv"]),
                "body_errors": [engine.check_body(b) for b in case.get("bodies", [])],
            }
        )
        if "adaptive" in case and isinstance(engine, SGLang):
            adaptive = case["adaptive"]
            results[-1]["adaptive_steps"] = engine.adaptive_steps(
                case["argv"], adaptive["config"], adaptive["batch_sizes"]
            )
    out = {"engine": sys.argv[1], "version": engine.version, "results": results,
           "defaults": getattr(engine, "defaults", {}),
           "stubbed": getattr(engine, "stubbed", [])}  # fmt: skip
    # Engines log to stdout too; the verdict is the one line with this marker.
    print(MARKER + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
