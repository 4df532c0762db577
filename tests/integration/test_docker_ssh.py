"""The Docker launcher against a remote Docker host, reached over ssh:// as a GPU host would be.

The "remote" host is this machine: a real sshd on a free loopback port, with keys made for the
test, in front of the real dockerd. speedbench reaches it through the system ssh client (the
docker SDK's ``use_ssh_client``), so the test puts a wrapper named ``ssh`` first on PATH that
adds the test's key and known-hosts file; the user's own ~/.ssh is never touched.
"""

from __future__ import annotations

import getpass
import io
import os
import shutil
import socket
import subprocess
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from tests.integration.conftest import our_containers

from speedbench.client.loadgen import LoadSettings, WorkItem
from speedbench.config import EngineConfig, SpecConfig
from speedbench.engines.docker import (
    FILES_MOUNT,
    docker_client,
    launch_files_archive,
)
from speedbench.engines.local import free_port
from speedbench.level import cpu_vllm_engine
from speedbench.records import read_parquet
from speedbench.sweep import run_grid
from speedbench.tokenize import PromptTokenizer

pytestmark = pytest.mark.integration
IMAGE = "speedbench/vllm-cpu:0.32.0"
BASE_IMAGE = "speedbench/base:bookworm"
K = 3


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


@pytest.fixture(autouse=True)
def no_our_containers():
    assert our_containers() == []
    yield
    assert our_containers() == []


def test_the_ssh_host_is_the_same_daemon(ssh_host):
    remote = docker_client(EngineConfig(model="-", docker_host=ssh_host.url))
    local = docker_client(EngineConfig(model="-"))
    try:
        assert remote.info()["ID"] == local.info()["ID"]
        assert ssh_host.logins() >= 1  # it really went through sshd
        assert IMAGE in {tag for image in remote.images.list() for tag in image.tags}
    finally:
        remote.close(), local.close()


def test_launch_files_reach_the_container_over_ssh_readable_by_its_user(ssh_host):
    """TensorRT-LLM's options YAML travels this way: copied in, not bind-mounted."""
    client = docker_client(EngineConfig(model="-", docker_host=ssh_host.url))
    text = "speculative_config:\n  decoding_type: Eagle\n  max_draft_len: 3\n"
    container = client.containers.create(
        BASE_IMAGE,
        ["cat", f"{FILES_MOUNT}/extra_llm_api_options.yaml"],
        user="65534:65534",
        labels={"speedbench": "1"},
    )
    try:
        container.put_archive("/", launch_files_archive({"extra_llm_api_options.yaml": text}))
        container.start()
        assert container.wait(timeout=60)["StatusCode"] == 0
        assert container.logs().decode() == text
        stream, _ = container.get_archive(f"{FILES_MOUNT}/extra_llm_api_options.yaml")
        with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
            (member,) = tar.getmembers()
            assert (member.mode & 0o7777, member.uid) == (0o644, 0)
    finally:
        container.remove(force=True)
        client.close()


def test_a_sweep_through_an_ssh_host_measures_and_cleans_up(ssh_host, tiny_pair, tmp_path):
    target, draft = tiny_pair
    logins = ssh_host.logins()
    engine = cpu_vllm_engine(
        str(target),
        launcher="docker",
        image=IMAGE,
        docker_host=ssh_host.url,
        port=free_port(),
        startup_timeout_s=600,
    )
    spec = SpecConfig(method="draft_model", num_speculative_tokens=K, draft_model=str(draft))
    items = [WorkItem("p0", "mixed", ("Name three sorting algorithms.",))]
    settings = LoadSettings(
        batch_size=1, max_tokens=1 + 6 * (K + 1), show_progress=False, split="hello"
    )
    summary = run_grid(
        engine,
        [spec],
        {"hello": items},
        [1],
        tmp_path,
        settings=settings,
        tokenizer=PromptTokenizer.from_pretrained(str(target)),
    )
    (level,) = summary.levels
    (record,) = read_parquet(tmp_path / spec.label / "hello" / "bs1" / "records.parquet")
    assert record.ok and record.output_tokens == 1 + 6 * (K + 1)
    assert level.al_counters == K + 1  # draft == target: every draft is accepted
    log = (tmp_path / spec.label / "engine.log").read_text()
    assert "Application startup complete" in log and "shutdown triggered" in log
    assert ssh_host.logins() > logins
