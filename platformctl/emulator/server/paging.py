"""Lists answered a page at a time (``limit`` and ``continue``), as kube-apiserver pages them.

A continue token names the last key a page held, as kube-apiserver's names the etcd key to start after: an object
created or deleted between pages does not shift the rest (an offset would skip or repeat one). Kinds listed in another
order than by key (events) page by offset. The token carries the resource version of the list's first page, and the
pages after it are read from the list as it was then (kube-apiserver reads them from etcd at that revision), kept for the
last few lists in flight: a page then costs its own objects, not a listing and sorting of all 120,000 pods, and a
client's pages are one consistent list. A token whose list is no longer kept (the server restarted, or more lists were
paged at once than it keeps) is ``410 Expired``, as kube-apiserver answers a continue whose revision etcd has compacted:
the client lists again from the start.
"""

from __future__ import annotations

import base64
import bisect
import json
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping
from typing import Any

from platformctl.kernel.cluster.apiobjects import ApiError, bad_request

EXPIRED = ("The provided continue parameter is too old to display a consistent list result. You can start a new list "
           "without the continue parameter, or use the continue token in this response to retrieve the remainder of the "
           "results. Continuing with the provided token results in an inconsistent list - objects that were created, "
           "modified, or deleted between the time the first chunk was returned and now may show up in the list.")
# kube-apiserver's words (1.32); it also offers an inconsistent continue token in the body's metadata, which the region
# does not: the toolkit lists again from the start.

Listing = tuple[list[Any], Callable[[Any], Any]]  # the objects in order, and each one's key


class Pages:
    """The lists the server has answered in pages and not finished, the newest ``keep``."""

    def __init__(self, keep: int = 16) -> None:
        self.keep = keep
        self._lists: OrderedDict[tuple[Hashable, ...], tuple[list[Any], list[Any], bool]] = OrderedDict()

    def page(self, scope: tuple[Hashable, ...], listing: Callable[[], Listing], args: Mapping[str, str],
             rv: str) -> tuple[list[Any], str, str, int]:
        """The objects of the page ``args`` asks for (``limit``, ``continue``) of the list ``scope`` names (the cluster,
        the kind, the namespace and the selectors), ``listing`` giving the objects as they are now (for a first page);
        with the list's resource version, the token of the next page ("" after the last) and how many objects the pages
        after it hold (kube-apiserver's ``remainingItemCount``). A continue of a list not kept is ``410 Expired``."""
        token = args.get("continue")
        parsed: dict[str, Any] = {}
        if token:
            try:
                parsed = json.loads(base64.urlsafe_b64decode(token.encode()))
                if not isinstance(parsed, dict) or not ("after" in parsed or "offset" in parsed):
                    raise ValueError(token)
            except (ValueError, TypeError):
                raise bad_request("continue key is not valid: the token is malformed") from None
        kept = self._lists.get((*scope, parsed.get("rv"))) if token else None
        if kept is not None:
            objects, keys, keyed = kept
            rv = str(parsed["rv"])
        elif token:
            raise ApiError(410, "Expired", EXPIRED)
        else:
            objects, key = listing()
            keys = [key(o) for o in objects]
            keyed = all(a <= b for a, b in zip(keys, keys[1:], strict=False))
        whole = (objects, keys, keyed)
        done = 0
        try:
            if "after" in parsed and keyed:
                done = bisect.bisect_right(keys, tuple(parsed["after"]))
            elif parsed:
                done = int(parsed["offset"])
        except (ValueError, KeyError, TypeError):
            raise bad_request("continue key is not valid: the token is malformed") from None
        objects, keys = objects[done:], keys[done:]
        limit = args.get("limit")
        if not limit:
            return objects, rv, "", 0
        try:
            n = int(limit)
        except ValueError:
            raise bad_request(f"limit: invalid value {limit!r}") from None
        if not 0 < n < len(objects):
            self._lists.pop((*scope, rv), None)  # the last page: the list is done with
            return objects, rv, "", 0
        mark: dict[str, Any] = {"after": list(keys[n - 1])} if keyed else {"offset": done + n}
        self._lists[(*scope, rv)] = whole
        self._lists.move_to_end((*scope, rv))
        while len(self._lists) > self.keep:
            self._lists.popitem(last=False)
        return objects[:n], rv, base64.urlsafe_b64encode(json.dumps({**mark, "rv": rv}).encode()).decode(), len(objects) - n
