"""Every pod template of deploy/kubernetes/ meets the Pod Security Standards' "restricted" profile
(tests/deploy/pod_security.py, a reading of the standard): the RayService's head and worker groups
(the head with the autoscaler container KubeRay adds from ``autoscalerOptions``) and any Deployment,
StatefulSet, DaemonSet, Job, CronJob or Pod a manifest holds. The checker itself is shown to refuse
each control's breach, and the manifest as it was before it met the profile."""

from __future__ import annotations

import copy
import subprocess
from typing import Any

import pytest
import yaml

from tests.deploy.pod_security import violations
from tests.deploy.prometheus_stack import REPO_ROOT

MANIFESTS = REPO_ROOT / "deploy" / "kubernetes"
# the manifest before it met the profile (no seccomp profile anywhere)
BEFORE = "47f1f27"


def pod_templates(documents: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """(where, pod template) for every pod a list of manifest documents makes."""
    found = []
    for doc in documents:
        kind, name = doc.get("kind"), doc.get("metadata", {}).get("name")
        spec = doc.get("spec") or {}
        if kind == "RayService":
            spec = spec["rayClusterConfig"]
        if kind in ("RayService", "RayCluster"):
            head = copy.deepcopy(spec["headGroupSpec"]["template"])
            if spec.get("enableInTreeAutoscaling"):
                options = spec.get("autoscalerOptions") or {}
                head["spec"]["containers"].append(
                    {"name": "autoscaler", "securityContext": options.get("securityContext")}
                )
            found.append((f"{kind}/{name} head", head))
            found += [
                (f"{kind}/{name} worker group {g['groupName']}", g["template"])
                for g in spec.get("workerGroupSpecs", [])
            ]
        elif kind in ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"):
            found.append((f"{kind}/{name}", spec["template"]))
        elif kind == "CronJob":
            found.append((f"{kind}/{name}", spec["jobTemplate"]["spec"]["template"]))
        elif kind == "Pod":
            found.append((f"{kind}/{name}", {"metadata": doc.get("metadata"), "spec": spec}))
    return found


def _documents(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]


def _all_templates() -> list[tuple[str, dict[str, Any]]]:
    found = []
    for path in sorted(MANIFESTS.glob("*.yaml")):
        if path.name != "kustomization.yaml":
            found += [(f"{path.name}: {where}", t) for where, t in pod_templates(_documents(path.read_text()))]
    return found


def test_the_manifests_have_pod_templates() -> None:
    wheres = [where for where, _ in _all_templates()]
    assert any("head" in w for w in wheres) and any("worker group" in w for w in wheres)


@pytest.mark.parametrize("where, template", _all_templates(), ids=lambda v: v if isinstance(v, str) else "")
def test_every_pod_template_meets_the_restricted_profile(where: str, template: dict[str, Any]) -> None:
    assert violations(template) == [], where


def test_the_manifest_before_failed_the_restricted_profile() -> None:
    shown = subprocess.run(
        ["git", "show", f"{BEFORE}:deploy/kubernetes/rayservice.yaml"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    if shown.returncode != 0:
        pytest.skip(f"commit {BEFORE} is not in this clone")
    found = {where: violations(t) for where, t in pod_templates(_documents(shown.stdout))}
    assert found and all(any(v.startswith("Seccomp:") for v in vs) for vs in found.values()), found


def _head() -> dict[str, Any]:
    (head,) = [t for where, t in _all_templates() if where.startswith("rayservice.yaml") and "head" in where]
    return copy.deepcopy(head)


def _container(template: dict[str, Any]) -> dict[str, Any]:
    return template["spec"]["containers"][0]


def _breach(change) -> list[str]:
    template = _head()
    change(template)
    return violations(template)


@pytest.mark.parametrize(
    "control, change",
    [
        ("Host Namespaces", lambda t: t["spec"].update(hostNetwork=True)),
        ("Privileged Containers", lambda t: _container(t)["securityContext"].update(privileged=True)),
        ("Capabilities", lambda t: _container(t)["securityContext"]["capabilities"].update(add=["SYS_ADMIN"])),
        ("Capabilities", lambda t: _container(t)["securityContext"]["capabilities"].update(drop=["NET_RAW"])),
        ("HostPath Volumes", lambda t: t["spec"]["volumes"].append({"name": "h", "hostPath": {"path": "/"}})),
        ("Host Ports", lambda t: _container(t)["ports"].append({"containerPort": 1, "hostPort": 8000})),
        ("AppArmor", lambda t: _container(t)["securityContext"].update(appArmorProfile={"type": "Unconfined"})),
        ("SELinux", lambda t: t["spec"]["securityContext"].update(seLinuxOptions={"type": "spc_t"})),
        ("/proc Mount Type", lambda t: _container(t)["securityContext"].update(procMount="Unmasked")),
        ("Sysctls", lambda t: t["spec"]["securityContext"].update(sysctls=[{"name": "kernel.msgmax", "value": "1"}])),
        ("Volume Types", lambda t: t["spec"]["volumes"].append({"name": "n", "nfs": {"server": "s", "path": "/"}})),
        ("Privilege Escalation", lambda t: _container(t)["securityContext"].pop("allowPrivilegeEscalation")),
        ("Running as Non-root", lambda t: _container(t)["securityContext"].update(runAsNonRoot=False)),
        ("Running as Non-root user", lambda t: t["spec"]["securityContext"].update(runAsUser=0)),
        ("Seccomp", lambda t: _container(t)["securityContext"].update(seccompProfile={"type": "Unconfined"})),
    ],
)
def test_the_check_refuses_each_controls_breach(control: str, change) -> None:
    assert any(v.startswith(f"{control}:") for v in _breach(change)), control


def test_seccomp_and_non_root_may_come_from_the_pod_alone() -> None:
    template = _head()
    for container in template["spec"]["containers"]:
        del container["securityContext"]["seccompProfile"], container["securityContext"]["runAsNonRoot"]
    assert violations(template) == []
    del template["spec"]["securityContext"]["seccompProfile"]
    assert [v.split(":")[0] for v in violations(template)] == ["Seccomp"] * len(template["spec"]["containers"])
