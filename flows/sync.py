"""Prefect's sync-or-async methods, as the synchronous code of these flows receives them.

Prefect 3 decorates many client methods so that they run synchronously when called outside an
event loop and return a coroutine inside one; their annotations say ``T | Coroutine[..., T]``.
The flows here call them from synchronous code, where the value is always ``T``; this says so
once, and fails loudly if a coroutine ever reaches it.
"""

from __future__ import annotations

import inspect
from collections.abc import Coroutine
from typing import Any, TypeVar, overload

T = TypeVar("T")


@overload
def synchronous(value: Coroutine[Any, Any, T]) -> T: ...
@overload
def synchronous(value: T) -> T: ...
def synchronous(value: Any) -> Any:
    """``value`` itself, called from synchronous code.

    Raises:
        TypeError: A coroutine arrived: the call ran inside an event loop and was not awaited.
    """
    if inspect.iscoroutine(value):
        value.close()
        raise TypeError("a Prefect call returned a coroutine in synchronous code; await it")
    return value
