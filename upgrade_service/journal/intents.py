"""One side effect, journalled before and after: the intent/done record rotation and remediation both write.

Before a call that changes the world (cordon, set a group's capacity, evict, terminate) its writer appends an
``intent`` (an ``id``, the ``op`` and its arguments); after it, a ``done`` with the same ``id``, whether it took effect
(``ok``) and what it returned. A run killed between the two leaves the intent unconfirmed; the next run settles it by
looking at the world (``settle_with_groups``, ``settle_eviction``) before it acts again, so nothing is done twice.
The rotation journal (``upgrade_service.journal.rotation.Journal``) and the remediation log
(``upgrade_service.remediation.remediate.Log``) are both an ``IntentLog``: the same two records, converted to and from the
store's dicts here and nowhere else.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from platformctl.kernel import failpoints
from platformctl.kernel.errors import NotFoundError
from platformctl.kernel.state import Record
from upgrade_service.journal.records import JournalRecord

INTENT = "intent"
DONE = "done"


@dataclass(frozen=True)
class Intent:
    """A side effect about to be made: ``op`` with its arguments (the node, instance, group, wave … it concerns)."""

    id: str
    op: str
    args: Mapping[str, Any] = field(default_factory=dict)

    def to_record(self) -> dict[str, Any]:
        return {"id": self.id, "op": self.op, **self.args}

    @classmethod
    def from_record(cls, d: Mapping[str, Any]) -> Intent:
        # Remediation logs written before the two records were one name the pairing ``key``.
        key = d.get("id", d.get("key"))
        return cls(str(key), str(d.get("op")), {k: v for k, v in d.items() if k not in ("id", "key", "op", "kind", "at")})


@dataclass(frozen=True)
class Done:
    """Whether the intent ``id`` took effect, and what the call returned or what a later run found."""

    id: str
    ok: bool = True
    result: Mapping[str, Any] = field(default_factory=dict)

    def to_record(self) -> dict[str, Any]:
        return {"id": self.id, "ok": self.ok, **self.result}

    @classmethod
    def from_record(cls, d: Mapping[str, Any]) -> Done:
        key = d.get("id", d.get("key"))
        return cls(str(key), bool(d.get("ok", True)),
                   {k: v for k, v in d.items() if k not in ("id", "key", "ok", "kind", "at")})


class IntentLog:
    """A stream that journals side effects: subclasses write records (``write``) and may add to every intent what it
    belongs to (``context``)."""

    def write(self, kind: str, **data: Any) -> Record:
        raise NotImplementedError

    def context(self) -> dict[str, Any]:
        return {}

    def append(self, record: JournalRecord) -> Record:
        """Write a typed record (its kind and the time are stamped by ``write``; a run's first record names it)."""
        body = record.to_record()
        if record.run is not None:
            body["run"] = record.run
        return self.write(record.KIND, **body)

    def intent(self, op: str, **args: Any) -> str:
        intent = Intent(uuid.uuid4().hex[:12], op, {**self.context(), **args})
        self.write(INTENT, **intent.to_record())
        return intent.id

    def done(self, key: str, ok: bool = True, **result: Any) -> None:
        self.write(DONE, **Done(key, ok, result).to_record())


class Writes(Protocol):
    def intent(self, op: str, **args: Any) -> str: ...

    def done(self, key: str, ok: bool = True, **result: Any) -> None: ...


def journalled(journal: Writes, op: str, action: Callable[[], Any], check: Callable[[], None] | None = None,
               **args: Any) -> Any:
    """One side effect, journalled before (``intent``) and after (``done``), with the failpoints a crash test
    kills at in between: the rotation's and remediation's every call that changes the world goes through here.
    ``check`` (the lease) is asked once more right before the call: a process paused between its intent and its
    call, and taken over meanwhile, stops there."""
    key = journal.intent(op, **args)
    failpoints.hit(f"intent:{op}")
    if check is not None:
        check()
    try:
        result = action()
    except NotFoundError as exc:
        journal.done(key, ok=False, error=str(exc))
        raise
    failpoints.hit(f"call:{op}")
    journal.done(key)
    return result


def settle_with_groups(journal: Writes, key: str, intent: Mapping[str, Any], groups: Any) -> bool:
    """Close an unconfirmed ``terminate`` or ``set-desired`` by asking the node groups what happened (an instance
    terminated only if still in service; a capacity raised if the group shows it). False for any other op."""
    if intent["op"] == "terminate":
        found = groups.instances([intent["instance"]]).get(intent["instance"])
        happened = found is None or found.leaving
        journal.done(key, ok=happened, recovered=True,
                     result="instance already terminating or gone" if happened else "call never took effect")
        return True
    if intent["op"] == "set-desired":
        happened = groups.describe(intent["group"]).desired >= int(intent["desired"])
        journal.done(key, ok=happened, recovered=True,
                     result="capacity already raised" if happened else "call never took effect")
        return True
    return False


def settle_eviction(journal: Writes, key: str, intent: Mapping[str, Any], cluster: Any) -> bool:
    """Close an unconfirmed eviction round by looking at its pods: one that is gone, terminating or made again (another
    uid) was evicted, and a one-at-a-time workload's such pod is on its way back (its next waits for it). False for
    any other op."""
    if intent["op"] != "evict":
        return False
    evicted = []
    uids = intent.get("uids") or {}
    sequence = intent.get("one_at_a_time") or {}
    for who in intent.get("pods", ()):
        namespace, _, name = who.partition("/")
        try:
            pod = cluster.get_pod(namespace, name)
            gone = pod.uid != uids.get(who, pod.uid) or pod.deletion_time is not None
        except NotFoundError:
            gone = True
        if gone:
            evicted.append({"pod": who, "uid": uids.get(who, ""), **sequence.get(who, {})})
    journal.done(key, ok=True, recovered=True, evicted=evicted, refused={},
                 result=f"{len(evicted)} of {len(intent.get('pods', ()))} pods found evicted")
    return True
