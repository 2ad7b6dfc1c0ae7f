"""The contract between the reconciler and whatever rotates a stage for it (``StageOperations.rotate``), read where both
leave it: the ledger. The reconciler's tests hold it of their fake stages, the process tests of the application
layer's adapter (``platformctl.app.stage_operations.StageOperator``) rotating a local region's clusters, so the fake cannot drift
from what the real adapter answers without one of them failing."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from release_pipeline.fold import Entry
from release_pipeline.replay import replay
from release_pipeline.rotation_result import STATUSES, StageRotation

# Each entry that records a rotation's result, and the statuses that entry may hold.
RESULT_OF = {"rotated": {"finished"}, "blocked": {"blocked"}, "paused": {"frozen"}, "halt": {"halted", "blocked"},
             "rollback-failed": {"halted", "blocked", "frozen"}, "rolled-back": {"finished"}}


def rotation_results_keep_the_contract(entries: Iterable[Entry | Mapping[str, Any]]) -> int:
    """Check every rotation result the ledger's ``entries`` hold (read from it, or as ``release history`` prints them);
    returns how many there were."""
    seen = 0
    for read in entries:
        entry = read if isinstance(read, Entry) else Entry.from_dict(read)
        result = entry.inputs.get("result")
        if entry.decision not in RESULT_OF or not isinstance(result, Mapping) or "status" not in result:
            continue  # a halt for another reason than a rotation (the soak's verdict) holds no rotation result
        seen += 1
        said = f"{entry.decision} {entry.id}: {result}"
        assert result["status"] in STATUSES and result["status"] in RESULT_OF[entry.decision], said
        assert set(result) <= {"status", "reason", "exit_code", "clusters", "booted_count", "first_light_count"}, said
        assert "booted" not in result and "first_light" not in result, said  # boots go to their own stream
        if result["status"] != "finished":
            assert result.get("reason"), said  # a rotation that did not finish says why
        again = StageRotation.from_dict(result).to_dict()
        assert {k: v for k, v in result.items() if k not in ("booted_count", "first_light_count")} == again, said
        for cluster in result.get("clusters") or ():
            assert cluster["cluster"] and (cluster["halted"] is None or isinstance(cluster["halted"], str)), said
            lit = cluster.get("first_light")
            assert lit is None or lit["verdict"] in ("pass", "fail", "inconclusive", None), said
        if entry.decision == "halt":
            assert replay(entry)["same"], said  # the rotation's gate decides again from what the entry keeps
    return seen
