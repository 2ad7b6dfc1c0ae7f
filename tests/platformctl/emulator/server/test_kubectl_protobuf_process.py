"""kubectl 1.32 and later send the objects ``kubectl create`` builds as protobuf (``application/vnd.kubernetes.protobuf``):
the local region reads them, as the kube-apiserver does, and answers in JSON, which kubectl accepts beside protobuf.

The newest kubectl on the machine drives a running local region: what it prints, and what the server then holds,
read back through the server's JSON API. What the server holds is compared with the JSON the same kubectl
prints for ``--dry-run=client -o json``: the object it would have sent as JSON, as kubectl 1.31 did.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import subprocess
import urllib.error
import urllib.request
from typing import Any

import pytest
from werkzeug.test import Client

from platformctl.emulator.server.protobuf import MAGIC, MEDIA_TYPE
from tests.process import environment, region_fixture

# ------------------------------------------------------------------------------------ the newest kubectl


def _client_minor(path: str) -> int | None:
    """The minor version a kubectl binary is, or None for one that is none of its own (the Cloud SDK's dispatcher
    runs the ``kubectl.1.NN`` beside it that matches the server)."""
    result = subprocess.run([path, "version", "--client", "-o", "json"], capture_output=True, text=True, timeout=30)
    if result.returncode != 0:
        return None
    version = json.loads(result.stdout)["clientVersion"]
    minor = re.match(r"\d+", version.get("minor", ""))
    if "dispatcher" in version.get("gitVersion", "") or minor is None:
        return None
    return int(minor.group())


def newest_kubectl() -> tuple[str, int] | str:
    """``kubectl`` on the PATH and the versioned ``kubectl.1.NN`` beside the binary it names: the newest one and its
    minor version, or why there is none that sends protobuf."""
    on_path = shutil.which("kubectl")
    if on_path is None:
        return "no kubectl on the PATH"
    beside = glob.glob(os.path.join(os.path.dirname(os.path.realpath(on_path)), "kubectl.*"))
    candidates = [on_path, *sorted(p for p in beside if re.fullmatch(r"kubectl\.\d+\.\d+", os.path.basename(p)))]
    versions = {path: minor for path in candidates if (minor := _client_minor(path)) is not None}
    if not versions:
        return f"no kubectl that names its own version among {', '.join(candidates)}"
    path = max(versions, key=lambda p: versions[p])
    if versions[path] < 32:
        return f"the newest kubectl here is 1.{versions[path]} ({path}); kubectl sends protobuf from 1.32 on"
    return path, versions[path]


@pytest.fixture(scope="module")
def kubectl_path() -> str:
    found = newest_kubectl()
    if isinstance(found, str):
        pytest.skip(found)
    return found[0]


def _member(info: dict[str, Any]) -> None:
    info["member"] = next(c["name"] for c in info["clusters"] if not c["name"].endswith("-host"))


region = region_fixture(prepare=_member)  # the kubectl tests ask for `kubectl_path` first: skipped before it starts


def kubectl(region: dict[str, Any], path: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([path, "--kubeconfig", region["kubeconfig"], "--context", region["member"], *args],
                            capture_output=True, text=True, timeout=90, env=environment(region["home"]))
    if check:
        assert result.returncode == 0, f"kubectl {' '.join(args)}: {result.stderr}"
    return result


def held(region: dict[str, Any], path: str) -> dict[str, Any] | None:
    """The object the server holds at an API path of the member cluster (its JSON API), or None when it holds none."""
    try:
        with urllib.request.urlopen(f"{region['kubernetes_endpoint']}/clusters/{region['member']}{path}", timeout=30) as answer:
            return json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        raise


def missing(want: Any, got: Any, where: str = "") -> list[str]:
    """Where ``got`` lacks or differs from a field of ``want`` (null fields of ``want`` are Go's zero times: none)."""
    if isinstance(want, dict):
        if not isinstance(got, dict):
            return [f"{where}: {got!r}"]
        return [m for k, v in want.items() if v is not None for m in missing(v, got.get(k), f"{where}.{k}")]
    if isinstance(want, list):
        if not isinstance(got, list) or len(got) != len(want):
            return [f"{where}: {got!r} is not {want!r}"]
        return [m for i, (w, g) in enumerate(zip(want, got)) for m in missing(w, g, f"{where}[{i}]")]
    return [] if want == got else [f"{where}: {got!r} is not {want!r}"]


def create_as_json_would(region: dict[str, Any], path: str, api_path: str, *args: str) -> dict[str, Any]:
    """``kubectl create ARGS`` (protobuf): asserts what kubectl prints and that the server holds every field of the
    object kubectl prints for ``--dry-run=client -o json``; returns what the server holds."""
    split = args.index("--") if "--" in args else len(args)
    flags, command = args[:split], args[split:]
    sent = json.loads(kubectl(region, path, "create", *flags, "--dry-run=client", "-o", "json", *command).stdout)
    group = sent["apiVersion"].split("/")[0] if "/" in sent["apiVersion"] else ""
    printed = kubectl(region, path, "create", *args).stdout
    assert printed == f"{sent['kind'].lower()}{'.' + group if group else ''}/{sent['metadata']['name']} created\n"
    obj = held(region, api_path)
    assert obj is not None, f"the server holds no {api_path}"
    sent.pop("status", None)  # the server's own
    assert missing(sent, obj) == []
    return obj


# ------------------------------------------------------------------------------------ over a real kubectl


def test_kubectl_sends_protobuf_and_reads_the_json_answer(kubectl_path: str, region: dict[str, Any]) -> None:
    result = kubectl(region, kubectl_path, "create", "namespace", "proto-probe", "-v=9")
    assert result.stdout == "namespace/proto-probe created\n"
    request = next(line for line in result.stderr.splitlines() if line.lstrip().startswith("curl") and "-XPOST" in line)
    assert f'-H "Content-Type: {MEDIA_TYPE}"' in request  # not JSON: the body this server used to refuse with a 415
    accept = re.search(r'-H "Accept: ([^"]*)"', request)
    assert accept is not None and accept.group(1).split(",") == [MEDIA_TYPE, "application/json"]
    answer = re.search(r'"Response" verb="POST" [^\n]*status="201 Created" headers=<\n(.*?)\n >', result.stderr, re.S)
    assert answer is not None and "Content-Type: application/json" in [h.strip() for h in answer.group(1).splitlines()]
    assert held(region, "/api/v1/namespaces/proto-probe")["status"]["phase"] == "Active"  # type: ignore[index]
    assert kubectl(region, kubectl_path, "delete", "namespace", "proto-probe").stdout.startswith('namespace "proto-probe" deleted')


def test_a_namespace_a_deployment_and_pods_are_created_got_and_deleted(kubectl_path: str, region: dict[str, Any]) -> None:
    ns = "proto-apps"
    create_as_json_would(region, kubectl_path, f"/api/v1/namespaces/{ns}", "namespace", ns)
    assert kubectl(region, kubectl_path, "get", "namespace", ns, "--no-headers").stdout.split()[:2] == [ns, "Active"]

    deployment = create_as_json_would(region, kubectl_path, f"/apis/apps/v1/namespaces/{ns}/deployments/web", "deployment", "web",
                                      "--image=nginx:1.27", "--port=8080", "--replicas=2", "-n", ns)
    assert deployment["spec"]["replicas"] == 2 and deployment["metadata"]["labels"] == {"app": "web"}
    assert "successfully rolled out" in kubectl(region, kubectl_path, "rollout", "status", "deployment/web", "-n", ns,
                                                "--timeout=90s").stdout
    assert kubectl(region, kubectl_path, "get", "deployment", "web", "-n", ns, "--no-headers").stdout.split()[:2] == ["web", "2/2"]
    replicas = held(region, f"/api/v1/namespaces/{ns}/pods?labelSelector=app%3Dweb")["items"]  # type: ignore[index]
    assert len(replicas) == 2
    assert all([c["image"] for c in p["spec"]["containers"]] == ["nginx:1.27"] for p in replicas)

    # `kubectl run` builds its pod as an unstructured object and sends JSON; `kubectl debug node/…` sends protobuf.
    assert kubectl(region, kubectl_path, "run", "solo", "--image=busybox:1.36", "--restart=Never", "-n", ns, "--",
                   "sleep", "3600").stdout == "pod/solo created\n"
    node = sorted(n["metadata"]["name"] for n in held(region, "/api/v1/nodes")["items"])[0]  # type: ignore[index]
    printed = kubectl(region, kubectl_path, "debug", f"node/{node}", "--image=busybox:1.36", "-n", ns).stdout
    debugger = re.fullmatch(rf"Creating debugging pod (node-debugger-{re.escape(node)}-\w+) with container debugger "
                            rf"on node {re.escape(node)}\.\n", printed)
    assert debugger is not None, printed
    pod = held(region, f"/api/v1/namespaces/{ns}/pods/{debugger.group(1)}")
    assert pod is not None and pod["spec"]["nodeName"] == node
    assert [(c["name"], c["image"]) for c in pod["spec"]["containers"]] == [("debugger", "busybox:1.36")]
    listed = json.loads(kubectl(region, kubectl_path, "get", "pods", "-n", ns, "-o", "json").stdout)["items"]
    assert {p["metadata"]["name"] for p in listed} == {"solo", debugger.group(1), *(p["metadata"]["name"] for p in replicas)}

    assert kubectl(region, kubectl_path, "delete", "deployment", "web", "-n", ns).stdout.startswith('deployment.apps "web" deleted')
    assert held(region, f"/apis/apps/v1/namespaces/{ns}/deployments/web") is None
    for name in ("solo", debugger.group(1)):
        assert kubectl(region, kubectl_path, "delete", "pod", name, "-n", ns).stdout.startswith(f'pod "{name}" deleted')
        assert held(region, f"/api/v1/namespaces/{ns}/pods/{name}") is None
    assert kubectl(region, kubectl_path, "delete", "namespace", ns).stdout.startswith(f'namespace "{ns}" deleted')
    assert held(region, f"/api/v1/namespaces/{ns}") is None


KINDS = [  # every kind `kubectl create` builds that the local region serves, besides namespaces and deployments
    ("/apis/batch/v1/namespaces/proto-kinds/jobs/once", "job", "once", "--image=busybox:1.36", "--", "echo", "hi"),
    ("/apis/batch/v1/namespaces/proto-kinds/cronjobs/often", "cronjob", "often", "--image=busybox:1.36",
     "--schedule=*/5 * * * *", "--restart=Never"),
    ("/apis/policy/v1/namespaces/proto-kinds/poddisruptionbudgets/none", "poddisruptionbudget", "none", "--selector=app=web",
     "--min-available=0"),
    ("/apis/policy/v1/namespaces/proto-kinds/poddisruptionbudgets/half", "poddisruptionbudget", "half", "--selector=app=web",
     "--max-unavailable=50%"),
    ("/api/v1/namespaces/proto-kinds/configmaps/settings", "configmap", "settings", "--from-literal=a=b", "--from-literal=empty="),
    ("/api/v1/namespaces/proto-kinds/serviceaccounts/robot", "serviceaccount", "robot"),
    ("/apis/scheduling.k8s.io/v1/priorityclasses/proto-high", "priorityclass", "proto-high", "--value=1000", "--description=high",
     "--preemption-policy=Never"),
    ("/apis/rbac.authorization.k8s.io/v1/clusterroles/proto-reader", "clusterrole", "proto-reader", "--verb=get,list",
     "--resource=pods,deployments.apps"),
    ("/apis/rbac.authorization.k8s.io/v1/clusterroles/proto-aggregate", "clusterrole", "proto-aggregate", "--aggregation-rule=a=b"),
    ("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/proto-readers", "clusterrolebinding", "proto-readers",
     "--clusterrole=proto-reader", "--user=u", "--group=g", "--serviceaccount=proto-kinds:robot"),
]


def test_every_kind_kubectl_create_builds_reaches_the_server_whole(kubectl_path: str, region: dict[str, Any]) -> None:
    kubectl(region, kubectl_path, "create", "namespace", "proto-kinds")
    for api_path, kind, name, *flags in KINDS:
        namespaced = "/namespaces/proto-kinds/" in api_path
        create_as_json_would(region, kubectl_path, api_path, kind, name, *(["-n", "proto-kinds"] if namespaced else []), *flags)
    assert held(region, "/apis/policy/v1/namespaces/proto-kinds/poddisruptionbudgets/none")["spec"]["minAvailable"] == 0  # type: ignore[index]
    assert held(region, "/api/v1/namespaces/proto-kinds/configmaps/settings")["data"] == {"a": "b", "empty": ""}  # type: ignore[index]
    secret = create_as_json_would(region, kubectl_path, "/api/v1/namespaces/proto-kinds/secrets/backend", "secret",
                                  "generic", "backend", "-n", "proto-kinds", "--from-literal=token=t0k")
    assert secret["data"] == {"token": "dDBr"} and secret["type"] == "Opaque"
    kubectl(region, kubectl_path, "delete", "secret", "backend", "-n", "proto-kinds")
    for api_path, kind, name, *_ in reversed(KINDS):
        namespaced = "/namespaces/proto-kinds/" in api_path
        result = kubectl(region, kubectl_path, "delete", kind, name, *(["-n", "proto-kinds"] if namespaced else []))
        assert re.match(rf'\S+ "{name}" deleted', result.stdout), result.stdout
        assert held(region, api_path) is None
    kubectl(region, kubectl_path, "delete", "namespace", "proto-kinds")


# ------------------------------------------------------------------------------------ in process: what is refused


def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = b""
    while n > 0x7F:
        out += bytes([n & 0x7F | 0x80])
        n >>= 7
    return out + bytes([n])


def _f(number: int, value: bytes | str | int) -> bytes:
    """One protobuf field: a varint for an int, else length-delimited."""
    if isinstance(value, int):
        return _varint(number << 3) + _varint(value)
    data = value.encode() if isinstance(value, str) else value
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def _body(api_version: str, kind: str, raw: bytes, encoding: str = "") -> bytes:
    return MAGIC + _f(1, _f(1, api_version) + _f(2, kind)) + _f(2, raw) + _f(3, encoding) + _f(4, "")


def _post(client: Client, path: str, data: bytes) -> tuple[int, dict[str, Any]]:
    response = client.post(f"/clusters/synth{path}", data=data, content_type=MEDIA_TYPE)
    assert response.mimetype == "application/json"
    return response.status_code, json.loads(response.get_data())


def test_a_pod_and_a_deployment_of_no_replicas_in_protobuf(client: Client) -> None:
    container = _f(1, "main") + _f(2, "busybox:1.36") + _f(8, _f(2, _f(1, "cpu") + _f(2, _f(1, "50m")))) + _f(16, 0)
    pod = _f(1, _f(1, "proto-pod") + _f(3, "") + _f(7, 0) + _f(8, b"")) + _f(2, _f(2, container) + _f(4, 0))
    code, created = _post(client, "/api/v1/namespaces/default/pods", _body("v1", "Pod", pod))
    assert code == 201, created
    spec = created["spec"]
    assert spec["containers"][0]["image"] == "busybox:1.36" and spec["containers"][0]["resources"]["requests"]["cpu"] == "50m"
    assert spec["terminationGracePeriodSeconds"] == 0  # a pointer sent as 0 is 0, not the default of 30

    template = _f(1, _f(11, _f(1, "app") + _f(2, "idle"))) + _f(2, _f(2, container))
    selector = _f(1, _f(1, "app") + _f(2, "idle"))
    deployment = _f(1, _f(1, "idle")) + _f(2, _f(1, 0) + _f(2, selector) + _f(3, template))
    code, created = _post(client, "/apis/apps/v1/namespaces/default/deployments", _body("apps/v1", "Deployment", deployment))
    assert code == 201, created
    assert created["spec"]["replicas"] == 0  # not the default of 1


def test_what_the_local_region_cannot_read_is_refused_not_dropped(client: Client) -> None:
    namespaces = "/api/v1/namespaces"
    # Fields of a newer version sent empty, as Go sends a plain field it leaves out of JSON: read as absent.
    newer = _f(99, "") + _f(98, 0) + _f(97, _f(1, 0) + _f(2, ""))
    assert _post(client, namespaces, _body("v1", "Namespace", _f(1, _f(1, "proto-ok") + newer)))[0] == 201
    code, status = _post(client, namespaces, _body("v1", "Namespace", _f(1, _f(1, "proto-new") + _f(99, "value"))))
    assert (code, status["reason"]) == (415, "UnsupportedMediaType") and "field 99 of ObjectMeta" in status["message"]
    code, status = _post(client, namespaces, _body("v1", "LimitRange", _f(1, _f(1, "proto-secret"))))
    assert (code, status["reason"]) == (415, "UnsupportedMediaType") and "LimitRange of v1" in status["message"]
    assert _post(client, namespaces, _body("v1", "Namespace", _f(1, _f(1, "proto-zip")), encoding="gzip"))[0] == 415
    assert _post(client, namespaces, b"\x0a\x0b")[0] == 415  # not the k8s\x00 envelope
    code, status = _post(client, namespaces, MAGIC + b"\x0a\x05ab")  # a field longer than the bytes left
    assert (code, status["reason"]) == (400, "BadRequest")
    assert _post(client, namespaces, _body("v1", "Namespace", _f(1, _f(1, 7))))[0] == 400  # a name that is a number
    assert held_names(client) >= {"proto-ok"} and not held_names(client) & {"proto-new", "proto-secret", "proto-zip"}


def held_names(client: Client) -> set[str]:
    return {n["metadata"]["name"] for n in json.loads(client.get("/clusters/synth/api/v1/namespaces").get_data())["items"]}
