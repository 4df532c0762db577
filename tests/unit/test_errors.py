"""How entry points end: SIGTERM and SIGHUP stop a run the way Ctrl-C does."""

from __future__ import annotations

import os
import signal
import time

import pytest

from speedbench.errors import EXIT_INTERRUPTED, finish


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_a_stop_signal_runs_the_clean_up_and_exits_128_plus_its_number(sig, capsys):
    cleaned = []

    def run() -> None:
        try:
            os.kill(os.getpid(), sig)
            time.sleep(5)  # never reached: the signal raises here
        finally:
            cleaned.append("engine stopped")
            os.kill(os.getpid(), sig)  # a second one during the clean-up is ignored

    before = signal.getsignal(sig)
    assert finish(run) == 128 + sig
    assert cleaned == ["engine stopped"]
    assert f"stopped by {signal.Signals(sig).name}" in capsys.readouterr().err
    assert signal.getsignal(sig) == before  # the handler is the caller's again


def test_ctrl_c_still_exits_130(capsys):
    def run() -> None:
        raise KeyboardInterrupt

    assert finish(run) == EXIT_INTERRUPTED == 130
    assert "interrupted" in capsys.readouterr().err
