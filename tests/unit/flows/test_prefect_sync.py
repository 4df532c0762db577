"""flows.sync.synchronous: what Prefect's sync-or-async methods give synchronous code."""

import warnings

import pytest

from flows.sync import synchronous


def test_a_value_passes_through_and_a_coroutine_is_refused_and_closed():
    marker = object()
    assert synchronous(marker) is marker

    async def deployment():
        return marker

    coroutine = deployment()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "coroutine was never awaited" would fail here
        with pytest.raises(TypeError, match="returned a coroutine in synchronous code"):
            synchronous(coroutine)
    assert coroutine.cr_frame is None  # closed, not left pending
