"""The inter-pod scheduling constraints a pod carries: required pod (anti-)affinity and topology spread.

Parsed once from a pod's spec (``spec.affinity.podAffinity`` / ``podAntiAffinity``
``requiredDuringSchedulingIgnoredDuringExecution`` and ``spec.topologySpreadConstraints``) into
frozen values, and written back by ``to_kube`` so a snapshot or an API answer round-trips. Only the
parts the scheduler's filters use are kept: preferred terms and ``ScheduleAnyway`` constraints
score, they never forbid, so a plan that asks where a pod *can* go ignores them (they are still
parsed, so that a malformed one is a clear error and a snapshot keeps them).

Read by ``platformctl.kernel.cluster.scheduling`` (the filters the planner and the simulator's scheduler
share) and by ``platformctl.kernel.cluster.model`` (the ``Pod`` value).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from platformctl.kernel.cluster.selectors import LabelSelector
from platformctl.kernel.errors import PlatformError


@dataclass(frozen=True, slots=True)
class PodAffinityTerm:
    """One required pod (anti-)affinity term: pods ``selector`` picks, in ``namespaces`` (or every namespace
    when ``all_namespaces``; the pod's own when both are empty), counted per value of ``topology_key``."""

    selector: LabelSelector | None  # None: the term selects no pod (a missing labelSelector)
    topology_key: str
    namespaces: tuple[str, ...] = ()
    all_namespaces: bool = False  # namespaceSelector: {} (a non-empty namespaceSelector is kept as every namespace)

    def covers_namespace(self, own: str, namespace: str) -> bool:
        if self.all_namespaces:
            return True
        return namespace in self.namespaces if self.namespaces else namespace == own

    def selects(self, own_namespace: str, namespace: str, labels: Mapping[str, str]) -> bool:
        """Whether a pod in ``namespace`` with ``labels`` is one this term (of a pod in ``own_namespace``) counts."""
        return self.selector is not None and self.covers_namespace(own_namespace, namespace) and self.selector.matches(labels)

    def to_kube(self) -> dict[str, Any]:
        out: dict[str, Any] = {"topologyKey": self.topology_key}
        if self.selector is not None:
            out["labelSelector"] = self.selector.to_dict()
        if self.namespaces:
            out["namespaces"] = list(self.namespaces)
        if self.all_namespaces:
            out["namespaceSelector"] = {}
        return out


@dataclass(frozen=True, slots=True)
class SpreadConstraint:
    """One ``topologySpreadConstraints`` entry. ``hard`` is ``whenUnsatisfiable: DoNotSchedule``."""

    max_skew: int
    topology_key: str
    hard: bool
    selector: LabelSelector | None
    min_domains: int | None = None
    honor_node_affinity: bool = True  # nodeAffinityPolicy: Honor (the default)
    honor_taints: bool = False  # nodeTaintsPolicy: Ignore (the default)

    def to_kube(self) -> dict[str, Any]:
        out: dict[str, Any] = {"maxSkew": self.max_skew, "topologyKey": self.topology_key,
                               "whenUnsatisfiable": "DoNotSchedule" if self.hard else "ScheduleAnyway"}
        if self.selector is not None:
            out["labelSelector"] = self.selector.to_dict()
        if self.min_domains is not None:
            out["minDomains"] = self.min_domains
        if not self.honor_node_affinity:
            out["nodeAffinityPolicy"] = "Ignore"
        if self.honor_taints:
            out["nodeTaintsPolicy"] = "Honor"
        return out


@dataclass(frozen=True, slots=True)
class InterPodConstraints:
    """What a pod asks of the pods around it, as the scheduler's filters read it."""

    affinity: tuple[PodAffinityTerm, ...] = ()  # required podAffinity
    anti_affinity: tuple[PodAffinityTerm, ...] = ()  # required podAntiAffinity
    spread: tuple[SpreadConstraint, ...] = ()  # every topologySpreadConstraint (hard ones filter)
    preferred: tuple[Any, ...] = ()  # preferred (anti-)affinity terms, as given: kept for the round trip only

    @property
    def empty(self) -> bool:
        return not (self.affinity or self.anti_affinity or self.spread)

    @property
    def hard_spread(self) -> tuple[SpreadConstraint, ...]:
        return tuple(c for c in self.spread if c.hard)

    def affinity_to_kube(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, terms in (("podAffinity", self.affinity), ("podAntiAffinity", self.anti_affinity)):
            if terms:
                out[name] = {"requiredDuringSchedulingIgnoredDuringExecution": [t.to_kube() for t in terms]}
        for name, preferred in self.preferred:
            out.setdefault(name, {})["preferredDuringSchedulingIgnoredDuringExecution"] = preferred
        return out


NO_CONSTRAINTS = InterPodConstraints()


def _obj(raw: Any, where: str, file: str | None) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise PlatformError("must be an object", file=file, field=where)
    return raw


def _selector(raw: Any, where: str, file: str | None) -> LabelSelector | None:
    return None if raw is None else LabelSelector.parse(raw, where, file)


def _term(raw: Any, where: str, file: str | None) -> PodAffinityTerm:
    raw = _obj(raw, where, file)
    key = raw.get("topologyKey")
    if not isinstance(key, str) or not key:
        raise PlatformError("must be a non-empty label key", file=file, field=f"{where}.topologyKey")
    namespaces = raw.get("namespaces") or []
    if not isinstance(namespaces, list) or not all(isinstance(n, str) for n in namespaces):
        raise PlatformError("must be a list of namespace names", file=file, field=f"{where}.namespaces")
    ns_selector = raw.get("namespaceSelector")
    if ns_selector is not None:
        _obj(ns_selector, f"{where}.namespaceSelector", file)
    return PodAffinityTerm(_selector(raw.get("labelSelector"), f"{where}.labelSelector", file), key,
                           tuple(namespaces), ns_selector is not None)


def _terms(raw: Any, where: str, file: str | None) -> tuple[PodAffinityTerm, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise PlatformError("must be a list", file=file, field=where)
    return tuple(_term(t, f"{where}[{i}]", file) for i, t in enumerate(raw))


def _spread(raw: Any, where: str, file: str | None) -> SpreadConstraint:
    raw = _obj(raw, where, file)
    skew = raw.get("maxSkew")
    if isinstance(skew, bool) or not isinstance(skew, int) or skew < 1:
        raise PlatformError(f"must be a whole number of at least 1 (got {skew!r})", file=file, field=f"{where}.maxSkew")
    key = raw.get("topologyKey")
    if not isinstance(key, str) or not key:
        raise PlatformError("must be a non-empty label key", file=file, field=f"{where}.topologyKey")
    when = raw.get("whenUnsatisfiable")
    if when not in ("DoNotSchedule", "ScheduleAnyway"):
        raise PlatformError(f"must be DoNotSchedule or ScheduleAnyway (got {when!r})", file=file,
                            field=f"{where}.whenUnsatisfiable")
    min_domains = raw.get("minDomains")
    if min_domains is not None and (isinstance(min_domains, bool) or not isinstance(min_domains, int) or min_domains < 1):
        raise PlatformError(f"must be a whole number of at least 1 (got {min_domains!r})", file=file,
                            field=f"{where}.minDomains")
    policies = {}
    for name, default in (("nodeAffinityPolicy", "Honor"), ("nodeTaintsPolicy", "Ignore")):
        value = raw.get(name, default)
        if value not in ("Honor", "Ignore"):
            raise PlatformError(f"must be Honor or Ignore (got {value!r})", file=file, field=f"{where}.{name}")
        policies[name] = value == "Honor"
    return SpreadConstraint(skew, key, when == "DoNotSchedule", _selector(raw.get("labelSelector"), f"{where}.labelSelector", file),
                            min_domains, policies["nodeAffinityPolicy"], policies["nodeTaintsPolicy"])


def parse_constraints(spec: Mapping[str, Any], where: str, file: str | None) -> InterPodConstraints:
    """The inter-pod constraints of a pod spec (``where`` names the spec in errors)."""
    affinity = spec.get("affinity") or {}
    if not isinstance(affinity, dict):
        raise PlatformError("must be an object", file=file, field=f"{where}.affinity")
    found: dict[str, tuple[PodAffinityTerm, ...]] = {}
    preferred: list[tuple[str, Any]] = []
    for name in ("podAffinity", "podAntiAffinity"):
        block = affinity.get(name) or {}
        at = f"{where}.affinity.{name}"
        _obj(block, at, file)
        found[name] = _terms(block.get("requiredDuringSchedulingIgnoredDuringExecution"),
                             f"{at}.requiredDuringSchedulingIgnoredDuringExecution", file)
        if block.get("preferredDuringSchedulingIgnoredDuringExecution"):
            preferred.append((name, block["preferredDuringSchedulingIgnoredDuringExecution"]))
    raw_spread = spec.get("topologySpreadConstraints") or []
    if not isinstance(raw_spread, list):
        raise PlatformError("must be a list", file=file, field=f"{where}.topologySpreadConstraints")
    spread = tuple(_spread(c, f"{where}.topologySpreadConstraints[{i}]", file) for i, c in enumerate(raw_spread))
    if not (found["podAffinity"] or found["podAntiAffinity"] or spread or preferred):
        return NO_CONSTRAINTS
    return InterPodConstraints(found["podAffinity"], found["podAntiAffinity"], spread, tuple(preferred))
