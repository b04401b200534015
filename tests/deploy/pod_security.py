"""The Kubernetes Pod Security Standards' "restricted" profile, checked offline over a pod template.

Written from the Pod Security Standards page (kubernetes.io/docs/concepts/security/
pod-security-standards, the current release's tables): the profile is every "baseline" control plus
the "restricted" ones, each over the pod's ``securityContext``, every container (``containers``,
``initContainers``, ``ephemeralContainers``), the volumes and the annotations. Where a control
allows a container field to be left unset because the pod sets it (``runAsNonRoot``,
``seccompProfile``), so does this check. It is a reading of the standard for CI without a cluster,
not Kubernetes' own admission code; ``violations`` lists what a "restricted" namespace would refuse.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

# baseline: capabilities a container may add
BASELINE_CAPABILITIES = frozenset(
    {
        "AUDIT_WRITE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "KILL",
        "MKNOD",
        "NET_BIND_SERVICE",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_CHROOT",
    }
)
# baseline: the sysctls a pod may set
SAFE_SYSCTLS = frozenset(
    {
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.ip_unprivileged_port_start",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
        "net.ipv4.ip_local_reserved_ports",
        "net.ipv4.tcp_keepalive_time",
        "net.ipv4.tcp_fin_timeout",
        "net.ipv4.tcp_keepalive_intvl",
        "net.ipv4.tcp_keepalive_probes",
    }
)
SELINUX_TYPES = frozenset({"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"})
# restricted: the only volume sources a pod may use
RESTRICTED_VOLUMES = frozenset(
    {
        "configMap",
        "csi",
        "downwardAPI",
        "emptyDir",
        "ephemeral",
        "persistentVolumeClaim",
        "projected",
        "secret",
    }
)
CONFINED_SECCOMP = frozenset({"RuntimeDefault", "Localhost"})
CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")


def _containers(spec: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for field in CONTAINER_LISTS:
        for container in spec.get(field) or []:
            yield f"{field}[{container.get('name', '?')}]", container


def _baseline(spec: dict[str, Any], annotations: dict[str, str]) -> Iterator[str]:
    pod = spec.get("securityContext") or {}
    contexts = [("pod", pod)] + [(where, c.get("securityContext") or {}) for where, c in _containers(spec)]
    for where, context in contexts:
        if (context.get("windowsOptions") or {}).get("hostProcess"):
            yield f"HostProcess: {where} sets windowsOptions.hostProcess"
        if context.get("privileged"):
            yield f"Privileged Containers: {where} is privileged"
        added = set((context.get("capabilities") or {}).get("add") or [])
        if added - BASELINE_CAPABILITIES:
            yield f"Capabilities: {where} adds {sorted(added - BASELINE_CAPABILITIES)}"
        apparmor = (context.get("appArmorProfile") or {}).get("type")
        if apparmor not in (None, "RuntimeDefault", "Localhost"):
            yield f"AppArmor: {where} has appArmorProfile {apparmor}"
        selinux = context.get("seLinuxOptions") or {}
        if selinux.get("type", "") not in SELINUX_TYPES or selinux.get("user") or selinux.get("role"):
            yield f"SELinux: {where} sets seLinuxOptions {selinux}"
        if context.get("procMount", "Default") != "Default":
            yield f"/proc Mount Type: {where} has procMount {context['procMount']}"
        if (context.get("seccompProfile") or {}).get("type") == "Unconfined":
            yield f"Seccomp: {where} is Unconfined"
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(field):
            yield f"Host Namespaces: {field} is true"
    for volume in spec.get("volumes") or []:
        if "hostPath" in volume:
            yield f"HostPath Volumes: volume {volume.get('name')}"
    for where, container in _containers(spec):
        for port in container.get("ports") or []:
            if port.get("hostPort"):
                yield f"Host Ports: {where} binds hostPort {port['hostPort']}"
    for key, value in annotations.items():
        if key.startswith("container.apparmor.security.beta.kubernetes.io/") and not (
            value == "runtime/default" or value.startswith("localhost/")
        ):
            yield f"AppArmor: annotation {key}={value}"
    for sysctl in pod.get("sysctls") or []:
        if sysctl.get("name") not in SAFE_SYSCTLS:
            yield f"Sysctls: {sysctl.get('name')} is not a safe sysctl"


def _restricted(spec: dict[str, Any]) -> Iterator[str]:
    pod = spec.get("securityContext") or {}
    for volume in spec.get("volumes") or []:
        sources = set(volume) - {"name"}
        if sources - RESTRICTED_VOLUMES:
            yield f"Volume Types: volume {volume.get('name')} uses {sorted(sources - RESTRICTED_VOLUMES)}"
    if pod.get("runAsUser") == 0:
        yield "Running as Non-root user: the pod's runAsUser is 0"
    pod_non_root = pod.get("runAsNonRoot") is True
    pod_seccomp = (pod.get("seccompProfile") or {}).get("type") in CONFINED_SECCOMP
    for where, container in _containers(spec):
        context = container.get("securityContext") or {}
        if context.get("allowPrivilegeEscalation") is not False:
            yield f"Privilege Escalation: {where} does not set allowPrivilegeEscalation: false"
        non_root = context.get("runAsNonRoot")
        if non_root is False or (non_root is None and not pod_non_root):
            yield f"Running as Non-root: neither {where} nor the pod sets runAsNonRoot: true"
        if context.get("runAsUser") == 0:
            yield f"Running as Non-root user: {where} has runAsUser 0"
        seccomp = (context.get("seccompProfile") or {}).get("type")
        if seccomp not in CONFINED_SECCOMP and not (seccomp is None and pod_seccomp):
            yield (f"Seccomp: neither {where} nor the pod sets seccompProfile.type RuntimeDefault or Localhost")
        capabilities = context.get("capabilities") or {}
        if "ALL" not in (capabilities.get("drop") or []):
            yield f"Capabilities: {where} does not drop ALL"
        if set(capabilities.get("add") or []) - {"NET_BIND_SERVICE"}:
            yield f"Capabilities: {where} adds more than NET_BIND_SERVICE"


def violations(template: dict[str, Any]) -> list[str]:
    """What the "restricted" profile refuses in a pod template (``{"metadata": ..., "spec": ...}``);
    empty when it admits the pod."""
    spec = template.get("spec") or {}
    annotations = (template.get("metadata") or {}).get("annotations") or {}
    return [*_baseline(spec, annotations), *_restricted(spec)]
