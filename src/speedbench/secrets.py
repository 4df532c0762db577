"""Keep credentials out of everything speedbench writes: logs, saved configs, MLflow.

A value is a secret when its key looks like a credential (``HF_TOKEN``, ``api_key``,
``password``, ...; not ``num_speculative_tokens``) or when the value itself looks like one
(``hf_...``, ``sk-...``). Engine command lines are redacted flag by flag (``--api-key X``), and an
engine's environment is never written at all: it is where tokens are passed.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

# Keys named like a credential: *_TOKEN (not num_speculative_tokens), *SECRET*, *PASSWORD*, ...
SECRET_KEY = re.compile(
    r"(?:^|[._-])(?:hf_|api_|access_|auth_)?token$|secret|passw(?:or)?d|api[_-]?key|credential",
    re.I,
)
SECRET_VALUE = re.compile(r"\b(hf_[A-Za-z0-9]{20,}|sk-[A-Za-z0-9]{20,})\b")
REDACTED = "***"


def redact(key: str, value: Any) -> str:
    """The string that may be stored for ``key``: credentials replaced by ``***``."""
    if SECRET_KEY.search(key):
        return REDACTED
    return redact_text(str(value))


def redact_text(text: str) -> str:
    """``text`` with credential-looking values (``hf_...``, ``sk-...``) replaced."""
    return SECRET_VALUE.sub(REDACTED, text)


def redact_args(args: Sequence[str]) -> list[str]:
    """A command line with the value of every credential flag replaced (both flag forms)."""
    out: list[str] = []
    hide_next = False
    for arg in args:
        if hide_next:
            out.append(REDACTED)
            hide_next = False
            continue
        flag, eq, _ = arg.partition("=")
        if flag.startswith("-") and SECRET_KEY.search(flag.lstrip("-")):
            if eq:
                out.append(f"{flag}={REDACTED}")
            else:
                out.append(arg)
                hide_next = True
            continue
        out.append(redact_text(arg))
    return out


def redacted_engine(engine: Any) -> dict[str, Any]:
    """An ``EngineConfig`` as a dict fit to save: no environment, redacted arguments."""
    data = engine.model_dump(exclude={"env"})
    data["extra_args"] = redact_args(data.get("extra_args") or [])
    return data
