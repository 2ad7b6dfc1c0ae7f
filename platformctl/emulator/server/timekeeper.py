"""The local region's time: it runs at ``speed`` while anyone works, and skips what nobody waits through.

Temporal's test server skips time whenever no client holds it; discrete-event simulators jump to the next event.
The local region does the same across processes. Its own clients (the toolkit's processes: rotations, remediation,
canary runners, ticks; ``region_client.ServerClock``) register, and tell it when they wait and until when; every
other request (kubectl, a person's script) is counted while it is in flight, and an open watch of theirs holds the
clock for as long as it stays open. The clock then moves in two ways:

- at ``speed`` times wall time, always (``advance``), so that a region nobody uses, or that an unregistered client
  watches, moves at its configured pace;
- and, when skipping is on, at least one client is registered, every registered client waits and no other request
  is in flight, straight to the next instant something is due: the simulation's next timer (a boot, a pod's start,
  a CronJob's schedule) or the earliest deadline a client waits for. Each jump is one step; after it, what woke
  (a deadline reached, a change a client waits on) is released under the same lock, so that the woken client holds
  the clock before anyone can skip past what it must see.

A client that waits on a change (an informer waiting for its watch) names the cluster and kind and the newest
resource version it has; it is released when that kind's newest change is newer. A registered client that dies is
forgotten when its process is gone, so a crash never stops the skipping for good; time itself never stops.

The region's time also waits for its own clients. A registered client that works (not every one of its threads
waits) holds the clock at most ``LEAD_SECONDS`` of region time past its last word (a request, a wait released, a
registration): a client starved of the CPU for a second on a busy machine would otherwise come back to a region 300
seconds on, find a CronJob's run already gone or a deadline already passed, and measure its own lag as the
platform's. The hold lasts ``HOLD_SECONDS`` of wall time of silence at most (a client may do work the region cannot
see, such as AWS calls to moto, or wait on something that is not the region); then time goes on at its pace, and the
status counts the hold as ``silent_holds``. Held time is not caught up afterwards: the pace goes on from where the
clock stood.
"""

from __future__ import annotations

import itertools
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from werkzeug.wrappers import Request, Response
from werkzeug.wsgi import ClosingIterator

from platformctl.kernel.clock import VirtualClock
from platformctl.kernel.region_client import process_alive

WAIT_CAP_SECONDS = 5.0  # wall seconds a wait request is held before the client is told to ask again
MAX_STEPS = 500  # jumps in one hold of the lock: requests get their turn between batches
LEAD_SECONDS = 5.0  # region seconds the clock may run past a working client's last word
HOLD_SECONDS = 2.0  # wall seconds a working client's silence holds the clock; then time goes on at its pace
START_HOLD_SECONDS = 15.0  # wall seconds a process the region started holds the clock until it registers
log = logging.getLogger("platformctl.emulator.server")

KINDS = {"nodes": "nodes", "pods": "pods", "pdbs": "poddisruptionbudgets", "poddisruptionbudgets": "poddisruptionbudgets"}


@dataclass
class Wait:
    until: float
    cluster: str | None = None
    kind: str | None = None
    rv: int = 0
    released: bool = False


@dataclass
class Client:
    id: str
    pid: int
    name: str
    participants: int = 1  # threads of the client that use the clock and are not parked
    waits: list[Wait] = field(default_factory=list)
    registered_wall: float = field(default_factory=time.time)
    heard: float = 0.0  # the region's time at the client's last word
    heard_wall: float = 0.0  # the keeper's wall clock (monotonic) then
    silent: bool = False  # its silence outlasted HOLD_SECONDS: it holds nothing until it speaks again
    expected: bool = False  # a process the region started (a pod's), not registered yet: it holds until it does
    woken_wall: float = float("-inf")  # the keeper's wall clock when a signal woke it: it works until HOLD_SECONDS after

    @property
    def waiting(self) -> bool:
        return len(self.waits) >= self.participants


class TimeKeeper:
    """Moves the region's ``clock`` under ``cond`` (the lock every cluster is read and changed under).

    ``tick`` is called after every move: it runs the clusters' own bookkeeping and returns whether anything changed;
    ``latest`` answers the newest change's resource version of a cluster's kind."""

    def __init__(self, clock: VirtualClock, cond: threading.Condition, speed: float, skip: bool,
                 tick: Callable[[], bool], latest: Callable[[str, str], int], *, lead: float = LEAD_SECONDS,
                 hold: float = HOLD_SECONDS, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.cond = cond
        self.speed = speed
        self.skip = skip
        self.lead = lead
        self.hold = hold
        self._mono = monotonic
        self._tick = tick
        self._latest = latest
        self.clients: dict[str, Client] = {}
        self._ids = itertools.count(1)
        self._v0 = clock.now()
        self._w0 = monotonic()
        self._offset = 0.0  # region seconds skipped, less those held back for a working client
        self.skipped = 0.0  # virtual seconds jumped over in all
        self.held = 0.0  # virtual seconds the pace gave up waiting for working clients
        self.silent_holds = 0  # holds that ran out: a working client silent for HOLD_SECONDS of wall time
        self.jumps = 0
        self._in_flight = 0
        self._flight_lock = threading.Lock()
        self.kick = threading.Event()  # a client started waiting: look at once, not at the next tick
        self._last_reap = 0.0

    # ---------------------------------------------------------------- requests in flight

    def begin_request(self) -> None:
        with self._flight_lock:
            self._in_flight += 1

    def end_request(self) -> None:
        with self._flight_lock:
            self._in_flight -= 1
        self.kick.set()

    @property
    def in_flight(self) -> int:
        with self._flight_lock:
            return self._in_flight

    def registered(self, client_id: str | None) -> bool:
        return bool(client_id) and client_id in self.clients

    # ---------------------------------------------------------------- clients

    def register(self, pid: int, name: str) -> Client:
        with self.cond:
            for expected in [c.id for c in self.clients.values() if c.expected and c.pid == pid]:
                del self.clients[expected]  # the process the region started speaks for itself now
            client = Client(f"c{next(self._ids)}-{pid}", pid, name)
            self.clients[client.id] = client
            self._heard(client)
            return client

    def expect(self, pid: int, name: str) -> None:
        """A process the region started (a pod's container, ``kubelet``) will register: until it does it holds the
        clock as a working client, up to ``START_HOLD_SECONDS`` of wall time (an interpreter's start is seconds of the
        CPU, minutes of the region's time at its pace; a process that never registers stops holding then)."""
        with self.cond:
            client = Client(f"c{next(self._ids)}-{pid}", pid, name, expected=True)
            self.clients[client.id] = client
            self._heard(client)

    def signalled(self, pid: int) -> None:
        """The region signalled a client's process (a pod's SIGTERM): it works from now, as a signal wakes a process
        whatever it waits on, so every wait of it is released and it holds the clock (as a working client does) until
        it speaks again or ``hold`` wall seconds pass; time does not skip past its grace period meanwhile."""
        with self.cond:
            mono = self._mono()
            for client in self.clients.values():
                if client.pid != pid:
                    continue
                for entry in client.waits:
                    entry.released = True
                client.waits.clear()
                client.woken_wall = mono
                self._heard(client)
            self.cond.notify_all()
        self.kick.set()

    def heard(self, client_id: str | None) -> None:
        """A registered client spoke (a request of its own): it holds the clock from this instant."""
        with self.cond:
            client = self.clients.get(client_id or "")
            if client is not None:
                self._heard(client)

    def _heard(self, client: Client) -> None:
        client.heard, client.heard_wall, client.silent = self.clock.now(), self._mono(), False

    def unregister(self, client_id: str) -> None:
        with self.cond:
            self.clients.pop(client_id, None)
            self.cond.notify_all()
        self.kick.set()

    def set_participants(self, client_id: str, participants: int) -> None:
        with self.cond:
            client = self.clients.get(client_id)
            if client is not None:
                client.participants = max(int(participants), 0)
                self._heard(client)
        self.kick.set()

    def wait(self, client_id: str, until: float | None, participants: int, cluster: str | None = None,
             kind: str | None = None, rv: int = 0, cap: float = WAIT_CAP_SECONDS, seconds: float | None = None) -> dict[str, Any]:
        """Hold the caller until the region's time reaches ``until`` (else ``seconds`` past its time now) or, given a
        cluster and kind, until that kind has a change newer than ``rv``; at most ``cap`` wall seconds (then
        ``released`` is false: ask again, with the ``until`` answered)."""
        kind = KINDS.get(kind or "", kind) if kind else None
        with self.cond:
            client = self.clients.get(client_id)
            if client is None:
                return {"code": 404, "error": f"no client {client_id!r}: register again"}
            if until is None:
                until = self.clock.now() + max(float(seconds or 0.0), 0.0)
            client.participants = max(int(participants), 1)
            entry = Wait(until, cluster, kind, rv)
            client.waits.append(entry)
            self._release_due()
            self.kick.set()
            end = time.monotonic() + cap
            while not entry.released:
                remaining = end - time.monotonic()
                if remaining <= 0 or client_id not in self.clients:
                    break
                self.cond.wait(min(remaining, 0.5))
            if entry in client.waits:
                client.waits.remove(entry)
            if client_id in self.clients:
                self._heard(client)
            now = self.clock.now()
            latest = self._latest(cluster, kind) if cluster and kind else 0
            return {"released": entry.released, "virtual_time": now, "wall_time": time.time(), "speed": self.speed,
                    "rv": latest, "until": until}

    # ---------------------------------------------------------------- time

    def _release_due(self) -> bool:
        """Release every wait whose deadline is reached or whose change came (under the lock): its client works now."""
        now = self.clock.now()
        released = False
        for client in self.clients.values():
            for entry in list(client.waits):
                if now >= entry.until or (entry.cluster and entry.kind and self._latest(entry.cluster, entry.kind) > entry.rv):
                    entry.released = True
                    client.waits.remove(entry)
                    self._heard(client)  # it works from this instant: the clock waits for its next word
                    released = True
        return released

    def _idle(self, client: Client, mono: float) -> bool:
        """Whether ``client`` holds nothing now: it waits (and no signal woke it since), or it was started by the
        region and never spoke within its hold."""
        if client.expected:
            return client.silent
        return client.waiting and mono - client.woken_wall > self.hold

    def _skippable(self) -> bool:
        mono = self._mono()
        return (self.skip and bool(self.clients) and all(self._idle(c, mono) for c in self.clients.values())
                and self.in_flight == 0)

    def _next_instant(self) -> float | None:
        due = [w.until for c in self.clients.values() for w in c.waits]
        nxt = self.clock.next_due()
        if nxt is not None:
            due.append(nxt)
        return min(due) if due else None

    def wall_target(self) -> float:
        return self._v0 + (self._mono() - self._w0) * self.speed + self._offset

    def _hold_limit(self) -> float | None:
        """The furthest the clock may go now: ``lead`` past the last word of every registered client that works and
        has not been silent for ``hold`` wall seconds (under the lock)."""
        mono = self._mono()
        limits = []
        for client in self.clients.values():
            if client.silent or self._idle(client, mono):
                continue
            if mono - client.heard_wall > (START_HOLD_SECONDS if client.expected else self.hold):
                client.silent = True
                self.silent_holds += 1
                log.info("clock: client %s (pid %d, %s) at work and silent for %.1f s: time goes on at its pace",
                         client.id, client.pid, client.name, mono - client.heard_wall)
                continue
            limits.append(client.heard + self.lead)
        return min(limits) if limits else None

    def target(self) -> float:
        """Where the clock goes at its pace (under the lock): ``wall_target``, unless a working client holds it. What
        a hold keeps back is given up, not caught up later: the pace goes on from where the clock stood."""
        target = self.wall_target()
        limit = self._hold_limit()
        if limit is not None and limit < target:
            held = target - max(limit, self.clock.now())
            self._offset -= held
            self.held += held
            target -= held
        return target

    def catch_up(self) -> None:
        """Before a request is answered: the clock brought to this instant of its pace, so that what the request
        stamps (an object's creation, the time it reads) is the region's now and not the last beat's, up to
        ``speed`` x 50 ms behind (15 s at 300x, which a canary would measure as a slower cluster)."""
        with self.cond:
            target = self.target()
            if self.clock.now() < target:
                self.clock.run_until(target)
                if self._tick() | self._release_due():
                    self.cond.notify_all()

    def advance(self) -> None:
        """One beat: time at its pace, then as many jumps as nobody is there to see."""
        if self._mono() - self._last_reap > 0.5:
            self._reap()
        with self.cond:
            self.clock.run_until(max(self.target(), self.clock.now()))
            changed = self._tick()
            changed = self._release_due() or changed
            for _ in range(MAX_STEPS):
                if not self._skippable():
                    break
                target = self._next_instant()
                now = self.clock.now()
                if target is None or target <= now:
                    break
                jump = max(target - self.wall_target(), 0.0)
                self.skipped += jump
                self._offset += jump
                self.jumps += 1
                self.clock.run_until(target)
                changed = self._tick() or changed
                changed = self._release_due() or changed
            if changed:
                self.cond.notify_all()

    def _reap(self) -> None:
        self._last_reap = self._mono()
        with self.cond:
            dead = [c.id for c in self.clients.values() if not process_alive(c.pid)]
            for client_id in dead:
                del self.clients[client_id]
            if dead:
                self.cond.notify_all()

    def status(self) -> dict[str, Any]:
        with self.cond:
            return {"skip": self.skip, "speed": self.speed, "skipped_seconds": round(self.skipped, 3), "jumps": self.jumps,
                    "held_seconds": round(self.held, 3), "silent_holds": self.silent_holds,
                    "lead_seconds": self.lead, "hold_seconds": self.hold, "in_flight": self.in_flight,
                    "clients": [{"id": c.id, "pid": c.pid, "name": c.name, "participants": c.participants,
                                 "waiting": c.waiting, "starting": c.expected, "until": min((w.until for w in c.waits), default=None)}
                                for c in self.clients.values()]}


class TimedApp:
    """The region's WSGI application with its time in front: ``/platformctl/v1/clock/…`` is the clients' protocol,
    and every other request that no registered client made is counted while it is in flight (a watch, until it
    closes), so that a person's kubectl holds the clock."""

    PREFIX = "/platformctl/v1/clock"

    def __init__(self, app: Callable[..., Iterable[bytes]], keeper: TimeKeeper) -> None:
        self.app = app
        self.keeper = keeper

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path.startswith(self.PREFIX):
            return self._clock(Request(environ), path.removeprefix(self.PREFIX))(environ, start_response)
        keeper = self.keeper
        keeper.catch_up()
        client = environ.get("HTTP_X_PLATFORMCTL_CLIENT")
        if keeper.registered(client):  # one of the region's own clients: its word holds the clock from here
            keeper.heard(client)
            return ClosingIterator(self.app(environ, start_response), [lambda: keeper.heard(client)])
        if path.startswith("/platformctl/v1/"):
            return self.app(environ, start_response)
        keeper.begin_request()
        try:
            result = self.app(environ, start_response)
        except BaseException:
            keeper.end_request()
            raise
        return ClosingIterator(result, [keeper.end_request])

    def _clock(self, request: Request, rest: str) -> Response:
        keeper = self.keeper
        try:
            body = json.loads(request.get_data() or b"{}") if request.method == "POST" else {}
            if rest in ("", "/") and request.method == "GET":
                return _json(keeper.status())
            if rest == "/clients" and request.method == "POST":
                keeper.catch_up()
                client = keeper.register(int(body.get("pid") or 0), str(body.get("name") or ""))
                return _json({"id": client.id, "skip": keeper.skip, "speed": keeper.speed,
                              "lead_seconds": keeper.lead, "hold_seconds": keeper.hold,
                              "virtual_time": keeper.clock.now(), "wall_time": time.time()})
            parts = rest.strip("/").split("/")
            if len(parts) >= 2 and parts[0] == "clients":
                client_id = parts[1]
                if len(parts) == 2 and request.method == "DELETE":
                    keeper.unregister(client_id)
                    return _json({"id": client_id, "unregistered": True})
                if len(parts) == 2 and request.method == "POST":
                    keeper.set_participants(client_id, int(body.get("participants", 1)))
                    return _json({"id": client_id, "participants": int(body.get("participants", 1))})
                if len(parts) == 3 and parts[2] == "wait" and request.method == "POST":
                    if "until" not in body and "seconds" not in body:
                        raise KeyError("until")
                    answer = keeper.wait(client_id, float(body["until"]) if "until" in body else None,
                                         int(body.get("participants", 1)), body.get("cluster"), body.get("kind"),
                                         int(body.get("rv") or 0), min(float(body.get("cap") or WAIT_CAP_SECONDS), 30.0),
                                         float(body["seconds"]) if "seconds" in body else None)
                    return _json(answer, int(answer.pop("code", 200)))
        except (ValueError, KeyError, TypeError) as exc:
            return _json({"error": f"bad clock request: {exc}"}, 400)
        return _json({"error": f"no clock endpoint {request.method} {rest or '/'}"}, 404)


def _json(body: Any, code: int = 200) -> Response:
    return Response(json.dumps(body, separators=(",", ":")), status=code, mimetype="application/json")

