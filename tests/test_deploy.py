"""deploy/kubernetes and the Dockerfile: valid for their tools, and saying
what docs/deploying.md promises (a native sidecar on a shared socket, probes that
can reach it, the policy from a ConfigMap)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml
from grpc_health.v1 import health_pb2, health_pb2_grpc

from conftest import ROOT, free_port, start_daemon
from squawk.v1 import policy_pb2 as pb
from squawk.v1 import policy_pb2_grpc as pb_grpc

DEPLOY = ROOT / "deploy" / "kubernetes"
BIN = Path(sys.executable).parent
MANIFESTS = sorted(DEPLOY.glob("*.yaml"))
SERVING = health_pb2.HealthCheckResponse.SERVING


def run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=ROOT)


@pytest.mark.parametrize("version", ["1.33.0", "1.37.0"])
def test_manifests_pass_the_kubernetes_schemas(version: str) -> None:
    assert MANIFESTS
    done = run(str(BIN / "kubernetes-validate"), "--strict", "-k", version, *map(str, MANIFESTS))
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_dockerfile_passes_hadolint() -> None:
    done = run(str(BIN / "hadolint"), "Dockerfile")
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_image_runs_as_non_root_without_build_tools_or_healthcheck() -> None:
    text = (ROOT / "Dockerfile").read_text()
    final = text[text.rindex("\nFROM ") :]
    assert "\nUSER 65532:65532" in final
    assert "apt-get" not in final and "make " not in final
    instructions = [line.split()[0] for line in text.splitlines() if line and line[0].isalpha()]
    assert "HEALTHCHECK" not in instructions


def pod() -> dict[str, Any]:
    (deployment,) = (
        d
        for path in MANIFESTS
        for d in yaml.safe_load_all(path.read_text())
        if d["kind"] == "Deployment"
    )
    spec: dict[str, Any] = deployment["spec"]["template"]["spec"]
    return spec


def flags(container: dict[str, Any]) -> dict[str, str]:
    return dict(arg.removeprefix("--").split("=", 1) for arg in container["args"])


def test_squawk_is_a_native_sidecar_on_a_shared_socket() -> None:
    spec = pod()
    (squawk,) = spec["initContainers"]
    assert squawk["restartPolicy"] == "Always"
    args = flags(squawk)
    socket = args["listen"].removeprefix("unix://")
    folder = str(Path(socket).parent)
    mounts = {
        c["name"]: {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
        for c in (squawk, *spec["containers"])
    }
    shared = [name for name, path in mounts["squawk"].items() if path == folder]
    assert shared, "the socket's folder is not a volume"
    volume = next(v for v in spec["volumes"] if v["name"] == shared[0])
    assert "emptyDir" in volume
    for container in spec["containers"]:
        assert mounts[container["name"]].get(shared[0]) == folder
    # The socket's group (mode 660) is the executor's too.
    assert spec["securityContext"]["runAsGroup"] == spec["securityContext"]["fsGroup"]


def test_every_probe_dials_the_health_port_and_the_policy_is_the_configmap(
    tmp_path: Path,
) -> None:
    spec = pod()
    (squawk,) = spec["initContainers"]
    args = flags(squawk)
    port = int(args["health-listen"].rsplit(":", 1)[1])
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert squawk[probe]["grpc"]["port"] == port, probe
    policy = Path(args["policy"])
    (mount,) = (m for m in squawk["volumeMounts"] if m["mountPath"] == str(policy.parent))
    volume = next(v for v in spec["volumes"] if v["name"] == mount["name"])
    configmap = next(
        d
        for path in MANIFESTS
        for d in yaml.safe_load_all(path.read_text())
        if d["kind"] == "ConfigMap" and d["metadata"]["name"] == volume["configMap"]["name"]
    )
    # The policy shipped in the ConfigMap is one the daemon accepts.
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(configmap["data"][policy.name])
    done = run(sys.executable, "-m", "squawk.daemon.cli", "check-policy", str(policy_file))
    assert done.returncode == 0, done.stderr
    # The grace fits: the sidecar's drain after the executor's, within the pod's.
    assert float(args["grace"]) < spec["terminationGracePeriodSeconds"]


def test_the_health_port_serves_health_and_nothing_else(tmp_path: Path) -> None:
    socket = tmp_path / "squawk.sock"
    port = free_port()
    daemon = start_daemon(
        "--health-listen",
        f"127.0.0.1:{port}",
        "--shutdown-notice",
        "1",
        listen=f"unix://{socket}",
    )
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            health = health_pb2_grpc.HealthStub(channel)
            check = health.Check  # type: ignore[attr-defined]
            assert check(health_pb2.HealthCheckRequest(), timeout=5).status == SERVING
            stub = pb_grpc.PolicyServiceStub(channel)
            with pytest.raises(grpc.RpcError) as caught:
                stub.Classify(pb.ClassifyRequest(), timeout=5)
            assert caught.value.code() == grpc.StatusCode.UNIMPLEMENTED
            # Draining: the probe port says so while calls are still answered.
            daemon.process.terminate()
            deadline = time.monotonic() + 5
            while check(health_pb2.HealthCheckRequest(), timeout=5).status == SERVING:
                assert time.monotonic() < deadline, "health never left SERVING"
                time.sleep(0.02)
        assert daemon.wait() == 0
    finally:
        daemon.stop()
