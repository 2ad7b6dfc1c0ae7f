"""Cluster snapshots: ``kubectl get nodes,pods,pdb -A -o json``'s ``v1 List``, read and written."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from platformctl.kernel.cluster.model.objects import Node, Pod, PodDisruptionBudget
from platformctl.kernel.cluster.model.parse import _obj, parse_node, parse_pdb, parse_pod
from platformctl.kernel.errors import TOO_DEEP, PlatformError


@dataclass(frozen=True)
class Snapshot:
    """The contents of a cluster snapshot: nodes, pods and PodDisruptionBudgets."""

    nodes: tuple[Node, ...]
    pods: tuple[Pod, ...]
    pdbs: tuple[PodDisruptionBudget, ...]
    source: str | None = None

    def to_kube(self) -> dict[str, Any]:
        return snapshot_document(self.nodes, self.pods, self.pdbs)


def snapshot_document(
    nodes: Iterable[Node], pods: Iterable[Pod], pdbs: Iterable[PodDisruptionBudget]
) -> dict[str, Any]:
    """A ``v1 List`` in the order kubectl prints ``get nodes,pods,pdb -A``."""
    items = [n.to_kube() for n in nodes]
    items += [p.to_kube() for p in pods]
    items += [b.to_kube() for b in pdbs]
    return {"apiVersion": "v1", "items": items, "kind": "List", "metadata": {"resourceVersion": ""}}


_PARSERS = {"Node": parse_node, "Pod": parse_pod, "PodDisruptionBudget": parse_pdb}


def parse_snapshot(document: Any, file: str | None = None) -> Snapshot:
    doc = _obj(document, "(document)", file)
    if doc.get("kind") != "List" or not isinstance(doc.get("items"), list):
        raise PlatformError(
            "expected a v1 List with items, as `kubectl get nodes,pods,pdb -A -o json` prints", file=file, field="kind"
        )
    nodes: list[Node] = []
    pods: list[Pod] = []
    pdbs: list[PodDisruptionBudget] = []
    sinks: dict[str, list[Any]] = {"Node": nodes, "Pod": pods, "PodDisruptionBudget": pdbs}
    for i, item in enumerate(doc["items"]):
        where = f"items[{i}]"
        item = _obj(item, where, file)
        kind = item.get("kind")
        parser = _PARSERS.get(kind)  # type: ignore[arg-type]  # any value; unknown kinds are refused next
        if parser is None:
            raise PlatformError(
                f"unsupported kind {kind!r} (a snapshot holds Node, Pod and PodDisruptionBudget)", file=file, field=f"{where}.kind"
            )
        sinks[kind].append(parser(item, where, file))  # type: ignore[index]  # kind was checked against sinks above
    _check_unique(nodes, lambda n: n.name, "node", file)
    _check_unique(pods, lambda p: p.key, "pod", file)
    _check_unique(pdbs, lambda b: b.key, "PodDisruptionBudget", file)
    return Snapshot(tuple(nodes), tuple(pods), tuple(pdbs), source=file)


def _check_unique(values: list[Any], key: Any, what: str, file: str | None) -> None:
    seen: set[Any] = set()
    for v in values:
        k = key(v)
        if k in seen:
            raise PlatformError(f"{what} {'/'.join(k) if isinstance(k, tuple) else k} appears twice", file=file, field="items")
        seen.add(k)


def load_snapshot(path: str | Path) -> Snapshot:
    file = str(path)
    try:
        with open(path, "rb") as f:
            document = json.load(f)
    except FileNotFoundError:
        raise PlatformError("snapshot file not found", file=file) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        where = f"line {exc.lineno} column {exc.colno}" if isinstance(exc, json.JSONDecodeError) else "encoding"
        raise PlatformError(f"not valid JSON ({where})", file=file) from None
    except RecursionError:
        raise PlatformError(TOO_DEEP, file=file) from None
    try:
        return parse_snapshot(document, file)
    except RecursionError:
        raise PlatformError(TOO_DEEP, file=file) from None



def save_snapshot(snapshot_doc: Mapping[str, Any], path: str | Path) -> None:
    tmp = Path(f"{path}.tmp")
    with open(tmp, "w") as f:
        json.dump(snapshot_doc, f, indent=4)
        f.write("\n")
    tmp.replace(path)
