"""The runner and the stage verdict against a simulated cluster: on a bad image the node-pool arm of that
image fails with the kubelet's reason while the old image's arm passes, and the verdict against the old
image says fail, naming the new one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from e2e_canary.definitions import CANARY_DIR, load_canaries, parse_canary
from e2e_canary.results import ResultStream, newest_at, results, streams_of
from e2e_canary.runner import Runner
from e2e_canary.verdict import stage_verdict
from platformctl.emulator.simulator import SimulatedCluster
from platformctl.kernel.state.sqlite import SQLiteStore
from tests import clusters

OLD, NEW = "ami-0000000000000001a", "ami-0000000000000002b"


def cluster() -> SimulatedCluster:
    sim = clusters.cluster({"general": 2}, image=OLD, boot=180.0, name="c1")
    sim.set_pool_image("general", NEW)
    sim.scale_pool("general", 4)  # mid-rotation: two nodes on each image
    sim.run_until_settled()
    return sim


CANARY = parse_canary({"name": "node-pool", "kind": "node-pool", "podsPerArm": 10, "deadline": 120}, "node-pool")


def test_a_bad_image_fails_its_own_arm_and_the_verdict_names_it(tmp_path: Path) -> None:
    sim = cluster()
    sim.set_image_fault(NEW, None)
    store = SQLiteStore(tmp_path / "state.db")
    runner = Runner("dev", "c1", sim, store)
    for _ in range(3):
        report = runner.run(CANARY)
        by_image = {(r.image, r.outcome) for r in report.results}
        assert by_image == {(OLD, "ok"), (NEW, "fail")}, by_image
    failed = next(r for r in report.results if r.outcome == "fail")
    assert "CreateContainerError" in failed.reason and NEW in failed.reason
    ok = next(r for r in report.results if r.outcome == "ok")
    assert 1.0 <= ok.metrics["pod_startup_seconds"] <= 4.0 and ok.pool == "general" and ok.zone == "us-east-1a"
    sim.advance(1)  # their grace period (0 s) runs out
    assert sim.list_namespaces("platformctl.io/canary") == [] and not sim.list_pods(namespace=report.namespace)
    verdict = stage_verdict(results(store, "dev"), sim.now(), 3600, baseline=OLD).to_dict()
    assert verdict["verdict"] == "fail" and NEW in verdict["reason"]
    assert verdict["arms"][NEW]["canaries"]["node-pool"]["metrics"]["failure_rate"]["verdict"] == "fail"


def test_a_healthy_stage_passes_and_a_crashed_runs_leftovers_are_reaped(tmp_path: Path) -> None:
    sim = cluster()
    store = SQLiteStore(tmp_path / "state.db")
    runner = Runner("dev", "c1", sim, store)
    for _ in range(3):
        report = runner.run(CANARY)
        assert {r.outcome for r in report.results} == {"ok"}
    assert stage_verdict(results(store, "dev"), sim.now(), 3600, baseline=OLD).verdict == "pass"
    sim.create_namespace("canary-node-pool-dead", {"platformctl.io/canary": "node-pool"})
    sim.create_pod(runner._pod(CANARY, "dead", "canary-node-pool-dead", runner.arms()[0], 0))
    assert runner.reap() == ["canary-node-pool-dead"]
    assert sim.list_namespaces("platformctl.io/canary") == []


def test_every_kind_passes_on_a_healthy_cluster_and_leaves_nothing(tmp_path: Path) -> None:
    sim = cluster()
    runner = Runner("dev", "c1", sim, SQLiteStore(tmp_path / "state.db"))
    canaries = {c.name: c for c in load_canaries(CANARY_DIR)}
    reports = {name: runner.run(c) for name, c in canaries.items()}
    for name, report in reports.items():
        assert report.results and {r.outcome for r in report.results} == {"ok"}, (name, report.results)
    service = reports["service"].results[0].metrics
    assert service["min_available"] >= canaries["service"].budget and service["roll_seconds"] > 0
    assert len(service["pod_startup_seconds"]) >= canaries["service"].replicas * 2  # the first pods and the rolled ones
    assert [r.metrics["fire_lateness_seconds"] for r in reports["cron"].results] == [0.0] * canaries["cron"].runs
    daemon = reports["daemon"].results
    assert sorted((r.image, r.pool) for r in daemon) == sorted((n.image, n.pool) for n in sim.list_nodes())
    sim.advance(1)
    assert sim.list_namespaces("platformctl.io/canary") == [] and not sim.list_pods()
    assert sim.api_objects.namespaces_in_use() == set()


def test_a_bad_image_fails_the_daemon_on_its_own_nodes_and_the_service_naming_it(tmp_path: Path) -> None:
    sim = cluster()
    sim.set_image_fault(NEW, None)
    runner = Runner("dev", "c1", sim, SQLiteStore(tmp_path / "state.db"))
    canaries = {c.name: c for c in load_canaries(CANARY_DIR)}
    daemon = runner.run(canaries["daemon"]).results
    assert {(r.image, r.outcome) for r in daemon} == {(OLD, "ok"), (NEW, "fail")}
    assert all("CreateContainerError" in r.reason and NEW in r.reason for r in daemon if r.outcome == "fail")
    service = runner.run(canaries["service"]).results
    assert [r.outcome for r in service] == ["fail"]
    assert "CreateContainerError" in service[0].reason and NEW in service[0].reason


def test_a_pod_the_platform_evicted_is_disrupted_not_failed_and_retried_once(tmp_path: Path) -> None:
    sim = cluster()
    runner = Runner("dev", "c1", sim, SQLiteStore(tmp_path / "state.db"))

    def evict_first(namespace_prefix: str) -> None:
        for pod in sim.list_pods():
            if pod.namespace.startswith(namespace_prefix) and not pod.terminating:
                assert sim.evict(pod.namespace, pod.name).code == 201
                return

    sim.clock.call_later(0.5, evict_first, "canary-node-pool-")  # its grace period is 0: gone before the next look
    rows = runner.run(CANARY).results
    disrupted = [r for r in rows if r.outcome == "disrupted"]
    assert len(disrupted) == 1 and "was deleted before it ran, by the platform" in disrupted[0].reason
    assert {r.outcome for r in rows} == {"ok", "disrupted"} and len(rows) == 2 * 10 + 1  # every pod, and the retry
    # A Deployment's pod drained mid-check: the Deployment replaces it, as it should; the check passes.
    service = next(c for c in load_canaries(CANARY_DIR) if c.name == "service")
    sim.clock.call_later(3, evict_first, "canary-service-")
    assert [r.outcome for r in runner.run(service).results] == ["ok"]


def test_a_slow_image_fails_the_node_pool_verdict_on_startup_latency(tmp_path: Path) -> None:
    sim = cluster()
    sim.set_image_fault(NEW, 8.0)
    store = SQLiteStore(tmp_path / "state.db")
    runner = Runner("dev", "c1", sim, store)
    for _ in range(3):
        assert {r.outcome for r in runner.run(CANARY).results} == {"ok"}
    verdict = stage_verdict(results(store, "dev"), sim.now(), 3600, baseline=OLD).to_dict()
    latency = verdict["arms"][NEW]["canaries"]["node-pool"]["metrics"]["pod_startup_seconds"]
    assert verdict["verdict"] == "fail" and latency["verdict"] == "fail" and latency["experiment"]["p99"] > 5


def test_a_pod_with_no_room_on_its_arm_is_the_canarys_infra_error_not_the_images_failure(tmp_path: Path) -> None:
    sim = cluster()  # two nodes on each image
    crowded = parse_canary({"name": "node-pool", "kind": "node-pool", "podsPerArm": 6, "deadline": 60,
                            "resources": {"cpu": "3", "memory": "64Mi"}}, "node-pool")  # two fit on a node
    rows = Runner("dev", "c1", sim, SQLiteStore(tmp_path / "state.db")).run(crowded).results
    by_image = {image: sorted(r.outcome for r in rows if r.image == image) for image in (OLD, NEW)}
    assert by_image[OLD] == by_image[NEW] == ["infra_error"] * 2 + ["ok"] * 4
    said = next(r.reason for r in rows if r.outcome == "infra_error")
    assert "no room" in said and "the arm is full" in said


class _AheadClock:
    """A client's guess of the server's time that runs 40 s ahead of it (a region busy elsewhere); ``sync`` asks the
    server, as ``region_client.ServerClock`` does."""

    def __init__(self, sim: SimulatedCluster) -> None:
        self.sim = sim

    def now(self) -> float:
        return self.sim.now() + 40.0

    def sync(self) -> float:
        return self.sim.now()

    def sleep(self, seconds: float) -> None:
        self.sim.clock.sleep(seconds)


class _AheadCluster:
    """The simulated cluster, seen by a client whose clock is ahead of the server's."""

    def __init__(self, sim: SimulatedCluster) -> None:
        self._sim = sim
        self.clock = _AheadClock(sim)

    def __getattr__(self, name: str) -> object:
        return getattr(self._sim, name)


def test_durations_are_the_servers_own_never_the_clients_guess_and_never_below_zero(tmp_path: Path) -> None:
    """A check's duration runs from the server's stamps (an object's creation, a pod's Ready, a Job's completion) to
    the server's stamp or reading: the same on a client whose clock runs ahead as on one whose clock agrees."""
    canaries = {c.name: c for c in load_canaries(CANARY_DIR)}
    figures = []
    for view in (lambda sim: sim, _AheadCluster):
        sim = cluster()
        runner = Runner("dev", "c1", view(sim), SQLiteStore(tmp_path / f"state-{len(figures)}.db"))
        figures.append({name: [r.metrics["check_seconds"] for r in runner.run(canaries[name]).results]
                        for name in ("daemon", "batch", "cron", "service")})
    assert figures[0] == figures[1]
    assert all(v >= 0 for values in figures[0].values() for v in values)


class _LateCluster:
    """The simulated cluster, seen by a client descheduled for ``lag`` seconds right after it creates a CronJob (or,
    ``before``, right before): the cluster goes on meanwhile (its CronJob fires, its Jobs run and finish)."""

    def __init__(self, sim: SimulatedCluster, lag: float, before: bool = False) -> None:
        self._sim = sim
        self.lag = lag
        self.before = before

    def create_object(self, obj: dict[str, object]) -> dict[str, object]:
        if obj.get("kind") == "CronJob" and self.before:
            self._sim.advance(self.lag)
        made = self._sim.create_object(obj)
        if obj.get("kind") == "CronJob" and not self.before:
            self._sim.advance(self.lag)
        return made

    def __getattr__(self, name: str) -> object:
        return getattr(self._sim, name)


def test_a_cron_check_that_comes_back_late_still_finds_each_run_the_cronjob_made_on_time(tmp_path: Path) -> None:
    """Five minutes away (past the check's deadline), the client finds both runs it watches, fired on schedule by the
    cluster's own stamps: its lag is not the platform's. The controller's default history of three would have deleted
    the first run before the client looked, and the check would have said "did not fire"."""
    canary = next(c for c in load_canaries(CANARY_DIR) if c.name == "cron")
    sim = cluster()
    runner = Runner("dev", "c1", _LateCluster(sim, 300.0), SQLiteStore(tmp_path / "state.db"))
    report = runner.run(canary)
    assert [r.outcome for r in report.results] == ["ok"] * canary.runs, report.results
    assert [r.metrics["fire_lateness_seconds"] for r in report.results] == [0.0] * canary.runs


def test_a_cron_check_that_comes_back_after_more_runs_than_its_cronjob_keeps_measured_nothing(tmp_path: Path) -> None:
    """Thirty minutes away: the CronJob fired every run on time and pruned the ones the check watches (it keeps the
    runs that can fire within the check's deadline). The check did not see them: not measured (``infra_error``), never
    "did not fire", which once halted a good candidate in prod-canary."""
    canary = next(c for c in load_canaries(CANARY_DIR) if c.name == "cron")
    sim = cluster()
    runner = Runner("dev", "c1", _LateCluster(sim, 1800.0), SQLiteStore(tmp_path / "state.db"))
    report = runner.run(canary)
    assert {r.outcome for r in report.results} == {"infra_error"}, report.results
    assert all("later runs (it keeps" in r.reason for r in report.results)


class _Suspended(_LateCluster):
    """As ``_LateCluster``, but the CronJob is made suspended: its controller never fires it."""

    def create_object(self, obj: dict[str, object]) -> dict[str, object]:
        if obj.get("kind") == "CronJob":
            obj = {**obj, "spec": {**obj["spec"], "suspend": True}}  # type: ignore[dict-item]
        return super().create_object(obj)


def test_a_cron_check_that_comes_back_late_to_a_cronjob_that_never_fired_still_says_it_did_not_fire(
        tmp_path: Path) -> None:
    """Just as late, but the controller never fired (no ``lastScheduleTime``): nothing was pruned, and every run is a
    failure, "did not fire"."""
    canary = next(c for c in load_canaries(CANARY_DIR) if c.name == "cron")
    report = Runner("dev", "c1", _Suspended(cluster(), 1800.0), SQLiteStore(tmp_path / "state.db")).run(canary)
    assert [r.outcome for r in report.results] == ["fail"] * canary.runs, report.results
    assert all("did not fire" in r.reason for r in report.results)


def test_a_check_late_to_create_its_first_object_is_given_its_whole_deadline_from_that_object(tmp_path: Path) -> None:
    """The deadline runs from the first object as the API server stamped it: a client that took 200 s of the cluster's
    time to send it (descheduled, or guessing the server's time when it could not ask) still watches both runs."""
    canary = next(c for c in load_canaries(CANARY_DIR) if c.name == "cron")
    sim = cluster()
    runner = Runner("dev", "c1", _LateCluster(sim, 200.0, before=True), SQLiteStore(tmp_path / "state.db"))
    report = runner.run(canary)
    assert [r.outcome for r in report.results] == ["ok"] * canary.runs, report.results


class _PausedCluster:
    """The simulated cluster, seen by a client descheduled for ``lag`` seconds right after its first look at the canary's
    pods (a throttled runner pod, a busy node): the cluster starts them meanwhile, and its deadline passes."""

    def __init__(self, sim: SimulatedCluster, lag: float) -> None:
        self._sim = sim
        self.lag = lag

    def list_pods(self, **kwargs: Any) -> list[Any]:
        pods = self._sim.list_pods(**kwargs)
        if self.lag and kwargs.get("namespace", "").startswith("canary-"):
            self._sim.advance(self.lag)
            self.lag = 0.0
        return pods

    def __getattr__(self, name: str) -> object:
        return getattr(self._sim, name)


def test_a_node_pool_check_paused_between_a_look_and_its_deadline_judges_by_what_the_kubelet_did_in_time(
        tmp_path: Path) -> None:
    """Its first look finds every pod still pending; by its next, the cluster's time is 300 s on, past the 120 s
    deadline. The pods started 2 s after they were made, by the kubelet's stamps: every one passes, none is a
    "pending" timeout drawn from the listing taken before the pause (which halted a good candidate in prod-canary)."""
    sim = cluster()
    runner = Runner("dev", "c1", _PausedCluster(sim, 300.0), SQLiteStore(tmp_path / "state.db"))
    report = runner.run(CANARY)
    assert len(report.results) == 20 and {r.outcome for r in report.results} == {"ok"}, report.results
    assert all(r.metrics["pod_startup_seconds"] <= 4.0 for r in report.results)


class _SlowMaker:
    """The simulated cluster, seen by a client descheduled for ``lag`` seconds before each of its first ``times`` pod
    creations: the canary's last pods are made minutes after the check began."""

    def __init__(self, sim: SimulatedCluster, lag: float, times: int) -> None:
        self._sim = sim
        self.lag = lag
        self.times = times

    def create_pod(self, pod: Any) -> Any:
        if self.times:
            self.times -= 1
            self._sim.advance(self.lag)
        return self._sim.create_pod(pod)

    def __getattr__(self, name: str) -> object:
        return getattr(self._sim, name)


def test_a_node_pool_check_slow_to_make_its_pods_gives_the_platform_its_whole_deadline_from_the_last_one(
        tmp_path: Path) -> None:
    """Its last pods are made 300 s after the check began (past a deadline counted from then): each started 2 s after
    the API server made it, and passes."""
    sim = cluster()
    runner = Runner("dev", "c1", _SlowMaker(sim, 100.0, 3), SQLiteStore(tmp_path / "state.db"))
    report = runner.run(CANARY)
    assert len(report.results) == 20 and {r.outcome for r in report.results} == {"ok"}, report.results


def test_a_node_pool_pod_the_kubelet_starts_only_after_the_deadline_is_a_timeout(tmp_path: Path) -> None:
    """Seen running at the look after the pause, but started by the kubelet 150 s after it was made, past the 120 s
    deadline: the pause changes nothing of what the image did."""
    sim = cluster()
    sim.set_image_fault(NEW, 150.0)
    report = Runner("dev", "c1", _PausedCluster(sim, 300.0), SQLiteStore(tmp_path / "state.db")).run(CANARY)
    by_image = {(r.image, r.outcome) for r in report.results}
    assert by_image == {(OLD, "ok"), (NEW, "timeout")}, report.results
    late = next(r for r in report.results if r.outcome == "timeout")
    assert "running only 15" in late.reason and "after it was made" in late.reason, late.reason


def test_result_streams_are_named_and_read_one_way_and_the_newest_result_is_the_newest_days_last(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "state.db")
    day = 86400.0 * 20_000  # 2024-10-04, UTC
    assert ResultStream.of("dev", "c1", day + 5).name == "canary/dev/c1/2024-10-04"
    for name in ("canary/dev/c1/2024-10-04", "canary/dev/c1"):
        assert ResultStream.parse(name) is not None and ResultStream.parse(name).name == name  # type: ignore[union-attr]
    assert [ResultStream.parse(n) for n in ("canary/dev", "canary//c1", "rotation/dev/c1", "canary/dev/c1/x/y")] == [None] * 4
    store.append("canary/dev/c1", {"kind": "result", "at": day + 7 * 86400})  # an older runner's undated stream
    store.append(ResultStream.of("dev", "c1", day + 10).name, {"kind": "result", "at": day + 10})
    store.append(ResultStream.of("dev", "c1", day + 86400 + 3).name, {"kind": "result", "at": day + 86400 + 3})
    store.append(ResultStream.of("dev", "c2", day + 50).name, {"kind": "result", "at": day + 50})
    store.append(ResultStream.of("prod", "c1", day + 9 * 86400).name, {"kind": "result", "at": day + 9 * 86400})
    # each cluster's newest day wins over its undated stream, whatever that holds; another stage is not read
    assert newest_at(store, "dev") == day + 86400 + 3
    assert [r.at for r in results(store, "dev", since=day, until=day + 86400, cluster="c1")] == [day + 10]
    assert {s.cluster for s in streams_of(store, "dev")} == {"c1", "c2"}


class _SlowToAct:
    """The simulated cluster, seen by a client descheduled for ``lag`` seconds each time, having seen a step of its
    check done, it acts again (a patch, a scale, a delete): the cluster goes on meanwhile, as on a busy machine."""

    def __init__(self, sim: SimulatedCluster, lag: float) -> None:
        self._sim = sim
        self.lag = lag

    def _late(self, act: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            self._sim.advance(self.lag)
            return act(*args, **kwargs)
        return call

    def __getattr__(self, name: str) -> object:
        attr = getattr(self._sim, name)
        return self._late(attr) if name in ("patch_object", "scale", "delete_object") else attr


def test_a_service_check_measures_the_platforms_steps_not_the_time_its_client_took_to_act(tmp_path: Path) -> None:
    """A busy machine's canary runner is slow to notice each step done and act on it; the service check's
    ``check_seconds`` and ``roll_seconds`` are what the cluster took (its stamps: creation, each pod's Ready
    transition), the same with a client 20 s late at every step as with a prompt one. (Measured to the moment the
    client looked, they came out 60 s and 20 s longer: the soak's judge then saw a good candidate's canary slower.)"""
    canary = next(c for c in load_canaries(CANARY_DIR) if c.name == "service")
    figures = []
    for lag in (0.0, 20.0):
        runner = Runner("dev", "c1", _SlowToAct(cluster(), lag), SQLiteStore(tmp_path / f"state-{lag:g}.db"))
        (result,) = runner.run(canary).results
        assert result.outcome == "ok", result
        figures.append((result.metrics["check_seconds"], result.metrics["roll_seconds"]))
    assert figures[0] == figures[1] and figures[0][0] > figures[0][1] > 0, figures
