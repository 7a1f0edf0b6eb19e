"""How a daemon reaches the fleet's Redis beyond a plain redis:// URL, against
real servers on loopback: `rediss://` with a private CA (and a client
certificate, for mutual TLS), and Redis Sentinel, which names the master;
and what a pod says when its settings differ from the fleet's.

The `rediss://` server is the dev set-up's Redis (bench/redis_server.py),
which has no TLS built in, behind a real TLS terminator
(tests/support/tls_proxy.py) with a certificate from the test's CA that
requires a client certificate from the same CA; so these tests run on every
machine, and the state they write is read back from the Redis behind it.
Sentinel is the same server binary, started with --sentinel.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from conftest import ROOT, free_port, start_daemon
from squawk.v1 import policy_pb2 as pb
from test_fleet import Pod, eventually, stop_pods
from test_tls import Pair, issue, make_ca
from tls_proxy import TlsProxy

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from bench.redis_server import RedisServer, server_binary

# One failing pod is a quorum here, so two pods show that state is shared:
# the second, which saw no failure, is refused by the fleet's breaker.
POLICY = """
state:
  store: redis
  key_prefix: "connect:"
  deadline: 250ms
  min_pods: 1
profiles:
  default:
    circuit_breaker: {minimum_calls: 4, failure_ratio: 0.5, window: 60s,
                      open_for: 30s, half_open_probes: 1, close_ratio: 0.5}
"""


@pytest.fixture(scope="module")
def policy_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("connect") / "policy.yaml"
    path.write_text(POLICY)
    return path


def start_pod(name: str, policy: Path, env: dict[str, str]) -> Pod:
    port = free_port()
    daemon = start_daemon(
        "--policy",
        str(policy),
        "--metrics-listen",
        f"127.0.0.1:{port}",
        env={"SQUAWK_STATE_POD": name, **env},
    )
    return Pod(name, daemon, port)


def assert_shared(first: Pod, second: Pod, upstream: str) -> None:
    """`first`'s failures open the fleet's breaker, which refuses `second`."""
    assert second.admit(upstream).allowed
    first.report(upstream, 503, 503, 503, 503)
    eventually(lambda: not second.admit(upstream).allowed, f"{second.name} refused by the fleet")
    reply = second.admit(upstream)
    assert reply.reason == pb.REASON_CIRCUIT_OPEN
    assert second.metric('squawk_state_answers_total{rpc="Admit",state="fleet"}') > 0


def assert_local(pod: Pod, upstream: str, where: str) -> str:
    """The pod cannot reach the store: it answers from its own state, says
    so once, and counts its answers local; returns its log."""
    assert pod.admit(upstream).allowed
    eventually(lambda: pod.metric("squawk_state_store_up") == 0, "the outage is seen")
    assert pod.metric('squawk_state_answers_total{rpc="Admit",state="local"}') > 0
    pod.channel.close()
    pod.daemon.process.terminate()
    pod.daemon.process.wait(timeout=15)
    log = pod.daemon.output()  # start to exit
    pod.daemon.log.close()
    assert log.count("unreachable") == 1, log
    assert where in log, log
    return log


# -- rediss:// -----------------------------------------------------------------


@dataclass
class TlsRedis:
    port: int  # the TLS proxy's
    ca: Pair
    client: Pair  # signed by `ca`
    redis: RedisServer  # behind the proxy

    @property
    def url(self) -> str:
        return f"rediss://127.0.0.1:{self.port}/0"

    def env(self, *, ca: bool = True, client: bool = True) -> dict[str, str]:
        env = {"SQUAWK_STATE_URL": self.url}
        if ca:
            env["SQUAWK_STATE_TLS_CA"] = str(self.ca.cert)
        if client:
            env["SQUAWK_STATE_TLS_CERT"] = str(self.client.cert)
            env["SQUAWK_STATE_TLS_KEY"] = str(self.client.key)
        return env

    def answers(self) -> bool:
        client = redis.Redis(
            port=self.port,
            ssl=True,
            ssl_ca_certs=str(self.ca.cert),
            ssl_certfile=str(self.client.cert),
            ssl_keyfile=str(self.client.key),
            socket_timeout=1,
        )
        try:
            return bool(client.ping())
        except redis.RedisError:
            return False
        finally:
            client.close()


@pytest.fixture(scope="module")
def tls_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsRedis]:
    folder = tmp_path_factory.mktemp("redis-pki")
    ca = make_ca(folder, "redis-ca")
    server = issue(folder, ca, "redis", "serverAuth")
    behind = RedisServer().start()
    try:
        proxy = TlsProxy(behind.port, server.cert, server.key, client_ca=ca.cert).start()
        try:
            served = TlsRedis(proxy.port, ca, issue(folder, ca, "squawk", "clientAuth"), behind)
            eventually(served.answers, "the TLS Redis answers", timeout_s=10)
            yield served
        finally:
            proxy.stop()
    finally:
        behind.stop()


def test_pods_with_the_ca_share_state_through_a_tls_redis(
    tls_redis: TlsRedis, policy_file: Path
) -> None:
    pods = [start_pod(f"tls-{i}", policy_file, tls_redis.env()) for i in range(2)]
    try:
        assert_shared(pods[0], pods[1], "tls-flights")
        assert all(p.metric("squawk_state_store_up") == 1 for p in pods)
    finally:
        stop_pods(pods)
    # The state is in the Redis behind the TLS proxy (the keys' names are digests).
    client = redis.Redis(port=tls_redis.redis.port)
    try:
        assert any(client.scan_iter(match="connect:*"))
    finally:
        client.close()


@pytest.mark.parametrize(
    ("ca", "client"),
    [(False, True), (True, False)],
    ids=["system-trust-only", "no-client-certificate"],
)
def test_a_pod_the_tls_redis_will_not_talk_to_decides_locally_and_says_so(
    tls_redis: TlsRedis, policy_file: Path, ca: bool, client: bool
) -> None:
    # Without the CA the server's certificate is not trusted; without a
    # client certificate the server ends the handshake.
    pod = start_pod("tls-stranger", policy_file, tls_redis.env(ca=ca, client=client))
    assert_local(pod, "tls-hotels", f"rediss://127.0.0.1:{tls_redis.port}")


CA = "state.tls_ca (SQUAWK_STATE_TLS_CA)"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"SQUAWK_STATE_TLS_CA": "<MISSING>"}, f"{CA} <MISSING>: No such file"),
        ({"SQUAWK_STATE_TLS_CA": "<DIR>"}, f"{CA} <DIR>: not a regular file"),
        ({"SQUAWK_STATE_TLS_CA": "<NOTPEM>"}, f"{CA} <NOTPEM>: not a PEM file"),
        ({"SQUAWK_STATE_TLS_CA": "<KEY>"}, f"{CA} <KEY>: holds no CA certificate"),
        ({"SQUAWK_STATE_TLS_CERT": "<CERT>"}, "state.tls_cert and state.tls_key go together"),
        (
            {"SQUAWK_STATE_TLS_CERT": "<CERT>", "SQUAWK_STATE_TLS_KEY": "<OTHERKEY>"},
            "state.tls_cert (SQUAWK_STATE_TLS_CERT) <CERT>: not a certificate, or not the one",
        ),
        (
            {"SQUAWK_STATE_URL": "redis://127.0.0.1:6399/0", "SQUAWK_STATE_TLS_CA": "<CA>"},
            "state.tls_ca (SQUAWK_STATE_TLS_CA): needs a rediss:// state.url",
        ),
    ],
    ids=[
        "missing", "directory", "not-pem", "no-certificate", "cert-alone", "wrong-key",
        "plain-url",
    ],
)  # fmt: skip
def test_tls_files_that_cannot_work_stop_the_start(
    tmp_path: Path, env: dict[str, str], message: str
) -> None:
    ca = make_ca(tmp_path, "ca")
    client = issue(tmp_path, ca, "client", "clientAuth")
    notpem = tmp_path / "not.pem"
    notpem.write_text("hello")
    names = {
        "<MISSING>": str(tmp_path / "missing.pem"),
        "<DIR>": str(tmp_path),
        "<NOTPEM>": str(notpem),
        "<KEY>": str(client.key),
        "<CA>": str(ca.cert),
        "<CERT>": str(client.cert),
        "<OTHERKEY>": str(ca.key),
    }
    given = {k: names.get(v, v) for k, v in env.items()}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "squawk.daemon.cli",
            "serve",
            "--listen",
            f"127.0.0.1:{free_port()}",
        ],
        cwd=ROOT,
        env={
            **_environ(),
            "SQUAWK_STATE_URL": f"rediss://127.0.0.1:{free_port()}/0",
            **given,
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    expected = message
    for short, path in names.items():
        expected = expected.replace(short, path)
    assert expected in done.stderr.strip().splitlines()[-1], done.stderr


def test_sentinels_and_a_url_together_stop_the_start() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "squawk.daemon.cli",
            "serve",
            "--listen",
            f"127.0.0.1:{free_port()}",
        ],
        cwd=ROOT,
        env={
            **_environ(),
            "SQUAWK_STATE_URL": f"redis://127.0.0.1:{free_port()}/0",
            "SQUAWK_STATE_SENTINELS": f"127.0.0.1:{free_port()}",
            "SQUAWK_STATE_SERVICE_NAME": "m",
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert "state.sentinels and state.url are both set" in done.stderr, done.stderr


def _environ() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("SQUAWK_")}


# -- Redis Sentinel ------------------------------------------------------------


@dataclass
class Sentinel:
    port: int
    master: RedisServer
    process: subprocess.Popen[bytes]

    def env(self) -> dict[str, str]:
        return {
            "SQUAWK_STATE_SENTINELS": f"127.0.0.1:{self.port}",
            "SQUAWK_STATE_SERVICE_NAME": "squawk-master",
        }


def _sentinel_names_the_master(port: int) -> Callable[[], bool]:
    def check() -> bool:
        client = redis.Redis(port=port, socket_timeout=1)
        try:
            return client.sentinel_get_master_addr_by_name("squawk-master") is not None
        except redis.RedisError:
            return False
        finally:
            client.close()

    return check


@pytest.fixture(scope="module")
def sentinel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sentinel]:
    master = RedisServer().start()
    folder = tmp_path_factory.mktemp("sentinel")
    port = free_port()
    config = folder / "sentinel.conf"
    config.write_text(
        f"port {port}\nbind 127.0.0.1\ndir {folder}\n"
        f"sentinel monitor squawk-master 127.0.0.1 {master.port} 1\n"
    )
    process = subprocess.Popen(
        [server_binary(), str(config), "--sentinel"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        eventually(_sentinel_names_the_master(port), "the sentinel names the master", 10)
        yield Sentinel(port, master, process)
    finally:
        process.kill()
        process.wait(timeout=10)
        master.stop()


def test_pods_share_state_through_the_master_the_sentinel_names(
    sentinel: Sentinel, policy_file: Path
) -> None:
    pods = [start_pod(f"sentinel-{i}", policy_file, sentinel.env()) for i in range(2)]
    try:
        assert_shared(pods[0], pods[1], "sentinel-flights")
        log = pods[0].daemon.output()
    finally:
        stop_pods(pods)
    # The state is on the master the sentinel named (the keys' names are digests).
    client = redis.Redis(port=sentinel.master.port)
    try:
        assert any(client.scan_iter(match="connect:*"))
    finally:
        client.close()
    assert f"sentinel 'squawk-master' via 127.0.0.1:{sentinel.port}" in log, log


def test_a_pod_whose_sentinel_is_away_decides_locally_and_says_so(policy_file: Path) -> None:
    port = free_port()
    pod = start_pod(
        "sentinel-alone",
        policy_file,
        {"SQUAWK_STATE_SENTINELS": f"127.0.0.1:{port}", "SQUAWK_STATE_SERVICE_NAME": "gone"},
    )
    assert_local(pod, "sentinel-hotels", f"sentinel 'gone' via 127.0.0.1:{port}")


# -- settings that differ ------------------------------------------------------


def test_a_pod_whose_thresholds_differ_from_the_fleets_says_so_once_per_upstream(
    tmp_path: Path,
) -> None:
    server = RedisServer().start()
    first, second = tmp_path / "first.yaml", tmp_path / "second.yaml"
    first.write_text(POLICY)
    second.write_text(POLICY.replace("failure_ratio: 0.5", "failure_ratio: 0.9"))
    pods = [
        start_pod("same-0", first, {"SQUAWK_STATE_URL": server.url}),
        start_pod("same-1", first, {"SQUAWK_STATE_URL": server.url}),
    ]
    try:
        for pod in pods:
            for _ in range(3):
                assert pod.admit("trains?api_key=QZcanaryQZk3yv4lue").allowed
        odd = start_pod("odd", second, {"SQUAWK_STATE_URL": server.url})
        pods.append(odd)
        for _ in range(3):
            assert odd.admit("trains?api_key=QZcanaryQZk3yv4lue").allowed
            assert odd.admit("buses").allowed  # its own key: its settings are the fleet's
            odd.report("trains?api_key=QZcanaryQZk3yv4lue", 200)
        eventually(lambda: "differ" in odd.daemon.output(), "the odd pod says so")
        logs = [pod.daemon.output() for pod in pods]
    finally:
        stop_pods(pods)
        server.stop()
    *same, odd_log = logs
    # The pods on the other side read the odd pod's fingerprint at their
    # own next syncs, and may say so too: once, and only for the upstream
    # they share with it.
    for log in same:
        lines = [line for line in log.splitlines() if "differ" in line]
        assert len(lines) <= 1 and all("trains?api_key=" in line for line in lines), log
    (line,) = [line for line in odd_log.splitlines() if "differ" in line]
    assert "WARNING" in line and "trains?api_key=" in line, line
    assert "QZcanaryQZ" not in line, line


@pytest.mark.parametrize(
    ("env", "flags"),
    [
        ({"SQUAWK_STATE_URL": "rediss://127.0.0.1:1/0", "SQUAWK_STATE_TLS_CA": "<PATH>"}, []),
        ({}, ["--tls-cert", "<PATH>", "--tls-key", "<PATH>"]),
    ],
    ids=["state-ca", "serve-tls"],
)
def test_a_file_path_in_a_start_error_passes_the_redaction_boundary(
    tmp_path: Path, env: dict[str, str], flags: list[str]
) -> None:
    # A path can hold what looks like a key (a directory named after one, a
    # secret pasted in the wrong setting): the start error names the file
    # through the same redaction as every other string it shows.
    secret = "sk-" + "a1b2c3d4e5f6g7h8i9j0" * 2
    path = str(tmp_path / secret / "ca.pem")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "squawk.daemon.cli",
            "serve",
            "--listen",
            f"127.0.0.1:{free_port()}",
            *(path if f == "<PATH>" else f for f in flags),
        ],
        cwd=ROOT,
        env={**_environ(), **{k: path if v == "<PATH>" else v for k, v in env.items()}},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert secret not in done.stderr, done.stderr
    assert "[REDACTED]" in last and "ca.pem" in last, last
