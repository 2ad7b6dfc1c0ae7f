"""Deploying a stage's program again: the two implementations of ``platformctl.kernel.deployer.Deployer``.

``LocalDeployer`` re-runs the program under the mock engine against the local region's AWS, with
the checkpoint of the previous run as the stack's state, and changes what ``pulumi up`` would:
a resource whose inputs are unchanged is left alone; a launch template whose inputs changed (a new
image) gets a new version, made the default, which its auto scaling group (on ``$Latest``) launches
new instances from; a group's sizes, subnets or template are updated in place; a resource the
program newly declares is created. Any other change (one Pulumi would replace) is refused on one
line rather than half-made (a role policy's document is updated in place too). A new or changed
Kubernetes object is applied to its cluster's API server with the deployer's kubeconfig
(``infra.kubeapply``), whose refusal stops the deploy; an object the program dropped is left.

``PulumiDeployer`` is the same step on a real account: Pulumi's Automation API runs ``pulumi up``
on the stage's stack in ``infra/``, with ``platformctl:imageLock`` pointing at the lock file for
the run (and put back after it). ``over_pins`` (the release pipeline's deploys) makes the lock file's
images win over the stage's pinned ones for the run (``platformctl:imagesFromLock``). A control plane's
Kubernetes version goes up in place, one minor version a deploy (EKS's ``UpdateClusterVersion``); EKS
never takes one down, so a rollback's deploy names the version it keeps (``kubernetes_version``).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import signal
import socket
import sys
import threading
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from infra.kubeapply import KubeApplier
from infra.materialize import IMAGE_LOCK_KEY, IMAGES_FROM_LOCK_KEY, MotoBackend, check_images, checkpoint_of, kubernetes_manifest, stage_config
from infra.mocked import run_stage
from platformctl.kernel import failpoints
from platformctl.kernel.clock import Clock
from platformctl.kernel.deployer import DEPLOY_LIMIT_SECONDS, Deployed, DeployLocked, DeployResult, ResourceChange
from platformctl.kernel.environment import AwsTarget, Environment
from platformctl.kernel.errors import PlatformError, Unavailable
from platformctl.kernel.humanize import human_duration
from platformctl.kernel.topology import Stage
from platformctl.kernel.who import os_user

LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
GROUP = "aws:autoscaling/group:Group"
ROLE_POLICY = "aws:iam/rolePolicy:RolePolicy"
EKS_CLUSTER = "aws:eks/cluster:Cluster"
KUBERNETES_VERSION_KEY = "platformctl:kubernetesVersion"
IGNORED_GROUP_INPUTS = ("desiredCapacity",)  # the program's ignore_changes: capacity belongs to the upgrade service


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def _changed_keys(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    return sorted(k for k in {*old, *new} if _canonical(old.get(k)) != _canonical(new.get(k)))


class DeployBackend:
    """The engine's provider for a deploy: compares every declaration with the checkpoint, then acts."""

    def __init__(self, region: str, previous: list[dict[str, Any]], target: AwsTarget | None = None,
                 kube: KubeApplier | None = None) -> None:
        self.moto = MotoBackend(region, target=target)
        self.kube = kube  # the deployer's kubeconfig: new and changed Kubernetes objects are applied with it
        self.previous = {(r["type"], r["name"]): r for r in previous}
        self.changes: list[ResourceChange] = []
        # What each declaration came to, so that a deploy that fails half-way still records what it made.
        self.answered: dict[tuple[str, str], dict[str, Any]] = {}

    def create(self, type_: str, name: str, inputs: dict[str, Any], provider: str) -> tuple[str, dict[str, Any]]:
        from botocore.exceptions import ClientError

        try:
            id_, outputs = self._create(type_, name, inputs, provider)
        except ClientError as exc:
            error = exc.response.get("Error", {})
            raise PlatformError(f"{type_} {name}: AWS answered {error.get('Code')}: {error.get('Message')}",
                                field="stage deploy") from None
        self.answered[(type_, name)] = json.loads(json.dumps(
            {"type": type_, "name": name, "id": id_, "inputs": inputs, "state": {**inputs, **outputs}}, default=str))
        return id_, outputs

    def checkpoint(self) -> list[dict[str, Any]]:
        """The previous state with every answered declaration in it: what is true now, even after a failure."""
        merged = {**self.previous, **self.answered}
        return list(merged.values())

    def _create(self, type_: str, name: str, inputs: dict[str, Any], provider: str) -> tuple[str, dict[str, Any]]:
        new = json.loads(json.dumps(inputs, default=str))
        old = self.previous.get((type_, name))
        if old is None:
            if type_.startswith("kubernetes:"):
                self._apply(type_, name, inputs, provider, "new Kubernetes object")
                meta = new.get("metadata") or {}
                return (f"{meta.get('namespace')}/{meta['name']}" if meta.get("namespace") else str(meta.get("name"))), {}
            made = self.moto.create(type_, name, inputs, provider)
            self.changes.append(ResourceChange("create", type_, name))
            return made
        keys = _changed_keys(old["inputs"], new)
        if type_ == GROUP:
            keys = [k for k in keys if k not in IGNORED_GROUP_INPUTS]
        if not keys and type_ == LAUNCH_TEMPLATE and (drifted := self.moto.launch_template_drift(old["id"], inputs)):
            # `pulumi up --refresh`: the template changed in EC2 since the stack's last deploy (a version made by hand,
            # the group on $Latest launches it); the program's data becomes the newest version again
            outputs = self.moto.update_launch_template(old["id"], inputs)
            self.changes.append(ResourceChange("update", type_, name, f"version {outputs['latestVersion']} (changed in "
                                               f"EC2 since the last deploy: {drifted}; put back)"))
            return old["id"], {**old["state"], **outputs}
        if not keys:
            self.changes.append(ResourceChange("unchanged", type_, name))
            return old["id"], old["state"]
        if type_ == LAUNCH_TEMPLATE and "name" not in keys:
            outputs = self.moto.update_launch_template(old["id"], inputs)
            detail = ", ".join(f"{k}: {old['inputs'].get(k)} -> {new.get(k)}" if k == "imageId" else k for k in keys)
            self.changes.append(ResourceChange("update", type_, name, f"version {outputs['latestVersion']} ({detail})"))
            return old["id"], outputs
        if type_ == GROUP and "name" not in keys:
            self.moto.update_auto_scaling_group(old["id"], inputs)
            self.changes.append(ResourceChange("update", type_, name, ", ".join(keys)))
            return old["id"], old["state"]
        if type_ == EKS_CLUSTER and keys == ["version"]:  # EKS upgrades a control plane in place, one minor at a time
            self.moto.clients["eks"].update_cluster_version(name=old["state"].get("name") or name, version=new["version"])
            self.changes.append(ResourceChange("update", type_, name, f"version {old['inputs'].get('version')} -> {new['version']}"))
            return old["id"], {**old["state"], "version": new["version"]}
        if type_ == ROLE_POLICY and set(keys) <= {"policy"}:
            self.moto.clients["iam"].put_role_policy(RoleName=new["role"], PolicyName=old["state"].get("name") or name,
                                                     PolicyDocument=new["policy"])
            self.changes.append(ResourceChange("update", type_, name, "policy"))
            return old["id"], {**old["state"], "policy": new["policy"]}
        if type_.startswith("kubernetes:"):
            self._apply(type_, name, inputs, provider, f"changed ({', '.join(keys)})")
            return old["id"], {**old["state"], **new}
        if type_.startswith(("platformctl:infra:", "pulumi:providers:")):
            return old["id"], old["state"]
        raise PlatformError(f"{type_} {name} changed ({', '.join(keys)}): the local region updates launch templates, "
                            "auto scaling groups, role policies and EKS versions in place, nothing else (`platformctl local down` and "
                            "`local up` start it afresh from the program)", field="stage deploy")


    def _apply(self, type_: str, name: str, inputs: dict[str, Any], provider: str, what: str) -> None:
        """A new or changed Kubernetes object, applied to its cluster (the provider's name) with the deployer's
        kubeconfig; without one (a deploy in a test's own process) it is only reported."""
        if self.kube is None:
            self.changes.append(ResourceChange("not-applied", type_, name, f"{what}: apply it with kubectl"))
            return
        done = self.kube.apply(provider.split("::")[-2], kubernetes_manifest(inputs))
        self.changes.append(ResourceChange("create" if done == "created" else "update", type_, name, what))


class LocalDeployer:
    """``stage deploy`` in the local region; the checkpoint file is the stack's state."""

    def __init__(self, checkpoint: Path, target: str, aws: AwsTarget | None = None, clock: Clock | None = None,
                 kubeconfig: str | None = None) -> None:
        self.checkpoint = checkpoint
        self.kubeconfig = kubeconfig  # whose Kubernetes objects the deploy applies: the deployer's (operator's, tick's)
        self.target = target
        self.aws = aws  # the region's AWS (region_client.local_aws)
        self.clock = clock  # the region's: its stack lock's time is the region's, as its tick reads it
        self.stack_lock = checkpoint.with_name(checkpoint.name + ".stack-lock.json")

    def lock_holder(self) -> str:
        return f"{os_user()}@{socket.gethostname()} (pid {os.getpid()})"  # the deploy runs in this process

    @contextlib.contextmanager
    def _mutex(self) -> Any:
        with open(self.checkpoint.with_name(self.checkpoint.name + ".lock"), "w") as held:
            fcntl.flock(held, fcntl.LOCK_EX)  # a look at the stack lock and its taking are one step
            yield

    def _take_lock(self, stage: Stage) -> str:
        """The stack's lock, as Pulumi's self-managed backends keep it (a file naming its creator and when): a deploy
        that finds one is ``DeployLocked``; one killed while it deploys leaves it behind, as ``pulumi up`` does."""
        now = self.clock.now() if self.clock is not None else time.time()
        with self._mutex():
            try:
                held = json.loads(self.stack_lock.read_text())
            except FileNotFoundError:
                held = None
            except (OSError, ValueError):
                held = {}  # unreadable: still a lock
            if held is not None:
                held = held if isinstance(held, dict) else {}
                by = f"{held.get('username', '?')}@{held.get('hostname', '?')} (pid {held.get('pid', '?')})"
                raise stack_locked(stage.name, f"{self.stack_lock}: created by {by} at {held.get('timestamp', '?')}", now)
            stamp = datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            mine = uuid.uuid4().hex  # Pulumi names each lock file by a fresh id, and removes only its own
            tmp = self.stack_lock.with_name(self.stack_lock.name + ".tmp")
            tmp.write_text(json.dumps({"id": mine, "pid": os.getpid(), "username": os_user(),
                                       "hostname": socket.gethostname(), "timestamp": stamp}) + "\n")
            tmp.replace(self.stack_lock)
            return mine

    def _give_back(self, mine: str) -> None:
        """Remove the stack lock if it is still this deploy's: one cleared while it ran (its holder taken for gone)
        may be another's by now."""
        with self._mutex():
            try:
                held = json.loads(self.stack_lock.read_text())
            except (OSError, ValueError):
                return
            if not isinstance(held, dict) or held.get("id") != mine:
                return
            self.stack_lock.unlink(missing_ok=True)

    def cancel(self, stage: Stage) -> None:
        with self._mutex():
            self.stack_lock.unlink(missing_ok=True)

    def _state(self) -> dict[str, Any]:
        """The stack's checkpoint: its resources, and what the region set of its ``release`` block (the ledger in the
        region's account, the tick suspended) when the region declared the stage's tick."""
        try:
            state = json.loads(self.checkpoint.read_text())
            resources = list(state["resources"])
        except (OSError, ValueError, KeyError, TypeError):
            raise PlatformError("the local region has no readable checkpoint of its stack (start it again with "
                                "`platformctl local up`)", file=str(self.checkpoint), field="stage deploy") from None
        release = state.get("release")
        return {"resources": resources, "release": dict(release) if isinstance(release, dict) else None}

    def _resources(self) -> list[dict[str, Any]]:
        """The stack's resources as its checkpoint keeps them."""
        return list(self._state()["resources"])

    def deploy(self, stage: Stage, image_lock: Path, over_pins: bool = False,
               kubernetes_version: str | None = None) -> DeployResult:
        self._resources()  # before the lock is taken: a region with no checkpoint changes nothing
        check_images(stage, image_lock, over_pins, self.aws, kubernetes_version)
        mine = self._take_lock(stage)
        failpoints.hit("deploy:locked")  # the stack locked, nothing made: a process killed here leaves its lock
        try:
            kube = KubeApplier(self.kubeconfig) if self.kubeconfig else None
            state = self._state()  # as the lock's holder reads it
            backend = DeployBackend(stage.region, state["resources"], self.aws, kube)
            release = state["release"]
            try:
                config = {**stage_config(stage, image_lock, release), **({IMAGES_FROM_LOCK_KEY: True} if over_pins else {}),
                          **({KUBERNETES_VERSION_KEY: kubernetes_version} if kubernetes_version else {})}
                run = run_stage(stage.name, backend, config=config, source=Path(stage.source), release=release is not None)
            except BaseException:
                self._save(stage, backend.checkpoint(), release)  # what was made before the failure stays known, as Pulumi keeps it
                raise
            finally:
                if kube is not None:
                    kube.close()
            self._save(stage, checkpoint_of(run), release)
        finally:
            self._give_back(mine)  # an update that ends, done or failed, gives its lock back
        images = {key: pool["image"] for key, pool in run.outputs["nodePools"].items()}
        return DeployResult(stage.name, self.target, str(image_lock), images, backend.changes)

    def deployed(self, stage: Stage) -> Deployed:
        resources = self._resources()
        templates = {r["inputs"].get("name"): r["inputs"].get("imageId") for r in resources if r["type"] == LAUNCH_TEMPLATE}
        pools = {f"{c.name}/{p.name}": templates.get(f"{c.name}-{p.name}") for c in stage.clusters() for p in c.node_pools}
        versions = {r["inputs"].get("name"): str(r["state"].get("version") or r["inputs"].get("version"))
                    for r in resources if r["type"] == EKS_CLUSTER}
        return Deployed({key: image for key, image in pools.items() if image},
                        {c.name: versions[c.name] for c in stage.clusters() if c.name in versions})

    def _save(self, stage: Stage, resources: list[dict[str, Any]], release: dict[str, Any] | None) -> None:
        tmp = self.checkpoint.with_name(self.checkpoint.name + ".tmp")
        tmp.write_text(json.dumps({"stage": stage.name, "resources": resources,
                                   **({"release": release} if release is not None else {})}) + "\n")
        tmp.replace(self.checkpoint)


def _to_stderr(line: str) -> None:
    print(line, file=sys.stderr)


_LOCK_CREATED = re.compile(r"\bat (\d{4}-\d\d-\d\dT[0-9:.]+(?:Z|[+-]\d\d:\d\d)?)\s*$")  # the backend's time, ending its line


def lock_created(holder: str) -> float | None:
    """When a stack's lock was taken, from the backend's own line for it (``…: created by user@host (pid N) at
    2026-11-27T03:01:09Z``); None when the line does not say."""
    found = _LOCK_CREATED.search(holder)
    if found is None:
        return None
    try:
        return datetime.fromisoformat(found.group(1).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def stack_locked(stage: str, holder: str, now: float | None) -> DeployLocked:
    """A locked stack as one line: its holder as the backend describes it and how long ago (``now``: the stage's
    time) it took the lock."""
    since = lock_created(holder)
    age = f", {human_duration(max(now - since, 0.0))} ago" if since is not None and now is not None else ""
    said = f" ({holder}{age})" if holder else ""
    return DeployLocked(f"stage {stage}: its Pulumi stack is locked by another update{said}: tried again next tick; "
                        f"if its holder is gone, `platformctl stage cancel --stage {stage}` (as `pulumi cancel`) clears "
                        "it", holder, since)


def pulumi_failure(stage: str, exc: Exception, now: float | None = None) -> Exception:
    """A failed ``pulumi up`` as one line: a locked stack (``ConcurrentUpdateError``, typed by the Automation API) is
    ``DeployLocked``, naming the lock's holder as the backend describes it and how long ago (``now``: this host's
    time) it took the lock; anything else is an ``Unavailable`` whose line is Pulumi's last ``error:`` line (its full
    output went to stderr as it ran)."""
    from pulumi import automation as auto

    # str() of the API's CommandError is its CommandResult's: " code: N", " stdout: ...", " stderr: ..." (each stream's
    # first line after its label)
    text = [line.strip().removeprefix("stdout: ").removeprefix("stderr: ").strip() for line in str(exc).splitlines()]
    text = [line for line in text if line]
    if isinstance(exc, auto.errors.ConcurrentUpdateError):
        return stack_locked(stage, next((line for line in text if "created by" in line), ""), now)
    errors = [line for line in text if line.startswith("error:")]
    named = [line for line in errors if line != "error: update failed"]  # the resource's own error, not the summary
    cause = (named or errors or text or [type(exc).__name__])[0]
    return Unavailable(f"stage {stage}: pulumi up failed: {cause}", transient=False)


def children_named(name: str) -> list[int]:
    """This process's child processes whose command is ``name`` (Linux's ``/proc``: the tick's image), found by each
    process's parent in its ``stat`` (a thread's ``children`` file may miss children while they run, as proc(5) says)."""
    me, found = os.getpid(), []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        comm, _, rest = text.partition(" (")[2].rpartition(") ")
        fields = rest.split()
        if comm == name and len(fields) > 1 and fields[1] == str(me):
            found.append(int(stat.parent.name))
    return found


def within(up: Any, limit: float, stage: str, grace: float = 120.0) -> Any:
    """``up()`` (``pulumi up`` through the Automation API), interrupted when it runs past ``limit`` wall seconds: the
    CLI is sent SIGINT (Pulumi cancels the update and gives its lock back), then SIGKILL after ``grace``. A lock this
    process took is then never older than the limit while its update runs, which is what lets a later tick clear one
    that is (``STALE_LOCK_SECONDS``)."""
    done: dict[str, Any] = {}

    def work() -> None:
        try:
            done["result"] = up()
        except BaseException as exc:  # handed to the caller's thread
            done["error"] = exc

    thread = threading.Thread(target=work, name="pulumi up", daemon=True)
    thread.start()
    thread.join(limit)
    if thread.is_alive():
        for sig, wait in ((signal.SIGINT, grace), (signal.SIGKILL, 10.0)):
            # looked for again while it waits: a CLI whose start a loaded machine delayed past the limit is sent it too
            sent: set[int] = set()
            end = time.monotonic() + wait
            while thread.is_alive() and time.monotonic() < end:
                for pid in set(children_named("pulumi")) - sent:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, sig)
                    sent.add(pid)
                thread.join(min(0.5, max(0.0, end - time.monotonic())))
            if not thread.is_alive():
                break
        raise Unavailable(f"stage {stage}: pulumi up ran past its limit of {human_duration(limit)} and was interrupted",
                          transient=True)
    if "error" in done:
        raise done["error"]
    return done["result"]


class PulumiDeployer:
    """``stage deploy`` on a real account: ``pulumi up`` on the stage's stack through the Automation API."""

    def __init__(self, infra_dir: Path, environment: Environment) -> None:
        self.infra_dir = infra_dir
        self.environment = environment  # the command's: the Pulumi CLI's PYTHONPATH starts from it

    def _stack(self, stage: Stage) -> Any:
        from pulumi import automation as auto

        # The program of this checkout (a release candidate's commit, extracted), not the package installed beside it.
        given = self.environment.get("PYTHONPATH")
        env = {"PYTHONPATH": os.pathsep.join(p for p in (str(self.infra_dir.resolve().parent), given) if p)}
        try:
            stack = auto.select_stack(stack_name=stage.name, work_dir=str(self.infra_dir),
                                      opts=auto.LocalWorkspaceOptions(env_vars=env))
        except FileNotFoundError:
            raise PlatformError("the Pulumi CLI is not installed: a real account is deployed with `pulumi up` "
                                "(https://www.pulumi.com/docs/install/); the local region needs neither",
                                field="stage deploy") from None
        except auto.errors.CommandError as exc:
            raise PlatformError(f"cannot select Pulumi stack {stage.name}: {str(exc).strip().splitlines()[-1]}",
                                file=str(self.infra_dir), field="stage deploy") from None
        return stack

    def deployed(self, stage: Stage) -> Deployed:
        outputs = self._stack(stage).outputs()
        pools = outputs.get("nodePools")
        clusters = outputs.get("clusters")
        return Deployed({key: pool["image"] for key, pool in (pools.value if pools else {}).items()},
                        {name: str(c["kubernetesVersion"]) for name, c in (clusters.value if clusters else {}).items()
                         if c.get("kubernetesVersion")})

    def lock_holder(self) -> str:
        return f"{os_user()}@{socket.gethostname()}"  # the lock is the pulumi CLI's: its pid is not known before

    def cancel(self, stage: Stage) -> None:
        from pulumi import automation as auto

        try:
            self._stack(stage).cancel()
        except auto.errors.CommandError as exc:
            raise pulumi_failure(stage.name, exc, time.time()) from None

    def deploy(self, stage: Stage, image_lock: Path, over_pins: bool = False,
               kubernetes_version: str | None = None) -> DeployResult:
        from pulumi import automation as auto

        check_images(stage, image_lock, over_pins, None, kubernetes_version)
        stack = self._stack(stage)
        for_run = {IMAGE_LOCK_KEY: str(image_lock.resolve()), **({IMAGES_FROM_LOCK_KEY: "true"} if over_pins else {}),
                   **({KUBERNETES_VERSION_KEY: kubernetes_version} if kubernetes_version else {})}
        saved = stack.get_all_config()
        for key, value in for_run.items():
            stack.set_config(key, auto.ConfigValue(value))
        try:
            result = within(lambda: stack.up(on_output=_to_stderr, refresh=True), DEPLOY_LIMIT_SECONDS, stage.name)  # stdout: `-o json`'s
        except auto.errors.CommandError as exc:
            raise pulumi_failure(stage.name, exc, time.time()) from None
        finally:  # the stack file as it was: these hold for this run only
            for key in for_run:
                if key in saved:
                    stack.set_config(key, saved[key])
                else:
                    stack.remove_config(key)
        pools = result.outputs.get("nodePools")
        images = {key: pool["image"] for key, pool in (pools.value if pools else {}).items()}
        changes = [ResourceChange(action, "", "", str(count)) for action, count in (result.summary.resource_changes or {}).items()]
        return DeployResult(stage.name, f"pulumi stack {stack.name}", str(image_lock), images, changes)
