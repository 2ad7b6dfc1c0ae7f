"""Pod Security admission, as kube-apiserver's built-in plugin enforces it on a namespace labelled
``pod-security.kubernetes.io/enforce: restricted`` (or ``baseline``): a pod that breaks the level is refused, whoever
creates it (a client, or a controller: its Job or ReplicaSet then reports ``FailedCreate``).

The checks are the Pod Security Standards' (kubernetes.io/docs/concepts/security/pod-security-standards), with the
wording of ``k8s.io/pod-security-admission``'s messages:

- baseline: no host namespaces, no privileged container, capabilities added only from the baseline's list, no
  ``hostPath`` volume, no host port, no ``Unconfined`` seccomp profile;
- restricted, on top: volumes of the allowed types only, ``allowPrivilegeEscalation: false``, ``runAsNonRoot: true``
  and no ``runAsUser: 0``, a ``RuntimeDefault`` or ``Localhost`` seccomp profile, capabilities dropping ``ALL`` and
  adding ``NET_BIND_SERVICE`` at most.

AppArmor, SELinux, ``procMount`` and sysctls are not checked (no pod the toolkit or its canaries make sets them).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

ENFORCE = "pod-security.kubernetes.io/enforce"
BASELINE_CAPABILITIES = {"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE",
                         "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}
RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected",
                      "secret"}


def _containers(spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [*(spec.get("initContainers") or []), *(spec.get("containers") or []), *(spec.get("ephemeralContainers") or [])]


def _names(found: list[str]) -> str:
    quoted = ", ".join(f'"{n}"' for n in found)
    return f"container {quoted}" if len(found) == 1 else f"containers {quoted}"


def violations(spec: Mapping[str, Any], level: str = "restricted") -> list[str]:
    """What the pod spec breaks of ``level`` (``baseline`` or ``restricted``), each as the admission plugin says it."""
    out: list[str] = []
    pod = spec.get("securityContext") or {}
    containers = _containers(spec)
    hosts = [f"{f}=true" for f in ("hostNetwork", "hostPID", "hostIPC") if spec.get(f)]
    if hosts:
        out.append(f"host namespaces ({', '.join(hosts)})")
    privileged = [str(c.get("name")) for c in containers if (c.get("securityContext") or {}).get("privileged")]
    if privileged:
        out.append(f"privileged ({_names(privileged)} must not set securityContext.privileged=true)")
    added = {str(c.get("name")): [a for a in ((c.get("securityContext") or {}).get("capabilities") or {}).get("add") or []
                                  if a not in BASELINE_CAPABILITIES] for c in containers}
    if any(added.values()):
        out.append(f"non-default capabilities ({_names([n for n, a in added.items() if a])} must not include "
                   f"{', '.join(sorted({x for a in added.values() for x in a}))} in securityContext.capabilities.add)")
    host_paths = [str(v.get("name")) for v in spec.get("volumes") or [] if "hostPath" in v]
    if host_paths:
        out.append(f"hostPath volumes ({', '.join(host_paths)})")
    ports = [str(c.get("name")) for c in containers if any(p.get("hostPort") for p in c.get("ports") or [])]
    if ports:
        out.append(f"hostPort ({_names(ports)} uses hostPort)")
    unconfined = (pod.get("seccompProfile") or {}).get("type") == "Unconfined" or any(
        ((c.get("securityContext") or {}).get("seccompProfile") or {}).get("type") == "Unconfined" for c in containers)
    if unconfined:
        out.append('seccompProfile (pod or containers must not set securityContext.seccompProfile.type to "Unconfined")')
    if level != "restricted":
        return out
    kinds = sorted({k for v in spec.get("volumes") or [] for k in v if k != "name" and k not in RESTRICTED_VOLUMES})
    if kinds:
        out.append(f"restricted volume types (volumes must not use {', '.join(kinds)})")
    escalating = [str(c.get("name")) for c in containers
                  if (c.get("securityContext") or {}).get("allowPrivilegeEscalation") is not False]
    if escalating:
        out.append(f"allowPrivilegeEscalation != false ({_names(escalating)} must set "
                   "securityContext.allowPrivilegeEscalation=false)")
    capabilities = [str(c.get("name")) for c in containers if "ALL" not in
                    (((c.get("securityContext") or {}).get("capabilities") or {}).get("drop") or [])
                    or any(a != "NET_BIND_SERVICE" for a in
                           ((c.get("securityContext") or {}).get("capabilities") or {}).get("add") or [])]
    if capabilities:
        out.append(f'unrestricted capabilities ({_names(capabilities)} must set securityContext.capabilities.drop=["ALL"])')
    non_root = [str(c.get("name")) for c in containers if (c.get("securityContext") or {}).get("runAsNonRoot") is not True]
    if pod.get("runAsNonRoot") is not True and non_root:
        out.append(f"runAsNonRoot != true (pod or {_names(non_root)} must set securityContext.runAsNonRoot=true)")
    if pod.get("runAsUser") == 0 or any((c.get("securityContext") or {}).get("runAsUser") == 0 for c in containers):
        out.append("runAsUser=0 (pod and containers must not set runAsUser=0)")
    profile = (pod.get("seccompProfile") or {}).get("type")
    unset = [str(c.get("name")) for c in containers
             if ((c.get("securityContext") or {}).get("seccompProfile") or {}).get("type") not in ("RuntimeDefault", "Localhost")]
    if profile not in ("RuntimeDefault", "Localhost") and unset:
        out.append(f'seccompProfile (pod or {_names(unset)} must set securityContext.seccompProfile.type to '
                   '"RuntimeDefault" or "Localhost")')
    return out


def refusal(namespace: Mapping[str, Any] | None, name: str, spec: Mapping[str, Any]) -> str | None:
    """kube-apiserver's message refusing a pod in ``namespace`` (its object), or None when the namespace's level
    admits it."""
    level = str((((namespace or {}).get("metadata") or {}).get("labels") or {}).get(ENFORCE) or "")
    if level not in ("baseline", "restricted"):
        return None
    found = violations(spec, level)
    if not found:
        return None
    return f'pods "{name}" is forbidden: violates PodSecurity "{level}:latest": {", ".join(found)}'
