"""Benchmark: one canary gate ask over a month and a half of stored results, against one over a day's worth.

The rotation's canary gate (and ``canary verdict``) reads the canary results of its window only: results
are kept in one stream per cluster and day, and a window is read from the days it covers, newest first,
until a result older than the window shows up. This measures that, side by side in one run, on both
state stores: SQLite, and DynamoDB (moto, in process). Each store holds results at the same rate (three
clusters, about a thousand results an hour, as ``dev``'s canaries write them) for a history of 20,000 and
of 1,000,000 results (six weeks); the gate asks about the last 30 minutes of one cluster. Printed: the
time of one ask (median of 7), the records it read from the store (SQLite: rows returned; DynamoDB: the
items its queries returned, what DynamoDB bills a key-condition query for), and its peak memory
(tracemalloc), for each history; and the ratios of the 1,000,000-result ask to the 20,000-result one
(target: within 2x; reading the history would be 50x). moto answers every query by walking every item
of the table (``moto/dynamodb/models/table.py``, ``Table.query``), so its wall time grows with the table
whatever the query asks: on moto the records read are the measure, as DynamoDB's own cost is.

Not part of the test run.

    .venv/bin/python benchmarks/gate_window.py [--big 1000000] [--small 20000]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from e2e_canary.results import ResultStream
from e2e_canary.verdict import Verdict, canary_gate
from platformctl.kernel.state import StateStore
from upgrade_service.running.gate import Question

CLUSTERS = ("dev-usw2-host", "dev-usw2a-01", "dev-usw2b-01")
PER_HOUR = 1000  # results an hour, over the three clusters
END = 1_800_000_000.0
OLD, NEW = "ami-0old", "ami-0new"


def history(total: int) -> dict[str, list[dict[str, object]]]:
    """``total`` results ending at END, at PER_HOUR, each in its cluster's day stream."""
    streams: dict[str, list[dict[str, object]]] = {}
    step = 3600.0 / PER_HOUR
    for i in range(total):
        at = END - (total - i) * step
        cluster = CLUSTERS[i % len(CLUSTERS)]
        row = {"kind": "result", "canary": "node-pool", "canary_kind": "node-pool", "attempt": f"a{i // 20}",
               "stage": "dev", "cluster": cluster, "zone": "us-west-2a", "pool": "general",
               "image": NEW if i % 2 else OLD, "outcome": "ok", "reason": "",
               "metrics": {"pod_startup_seconds": 1.8 + (i % 7) * 0.05, "check_seconds": 4.0}, "at": at}
        streams.setdefault(ResultStream.of("dev", cluster, at).name, []).append(row)
    return streams


def ask_once(store: StateStore) -> Callable[[], Verdict]:
    gate = canary_gate(store, 1800.0)
    question = Question("dev-usw2a-01", "dev", 2, END, {"general": NEW}, frozenset({OLD, NEW}))
    return lambda: gate(question)


class Counted:
    """The store's own reads, counted where they leave it: records SQLite returned, items DynamoDB's queries returned."""

    def __init__(self, store: object) -> None:
        self.read = 0
        ddb = getattr(store, "_ddb", None)
        if ddb is not None:
            count = self

            class Client:
                def __getattr__(self, name: str) -> object:
                    attr = getattr(ddb, name)
                    if name not in ("query", "get_item"):
                        return attr

                    def call(**kwargs: object) -> dict[str, object]:
                        answer = attr(**kwargs)
                        count.read += len(answer.get("Items", [])) if name == "query" else int("Item" in answer)
                        return answer

                    return call

            store._ddb = Client()  # type: ignore[attr-defined]
        else:
            for name in ("read", "read_back", "streams"):
                original = getattr(store, name)
                setattr(store, name, self._counting(original))

    def _counting(self, original: Callable[..., list[object]]) -> Callable[..., list[object]]:
        def call(*args: object, **kwargs: object) -> list[object]:
            found = original(*args, **kwargs)
            self.read += len(found)
            return found

        return call


def measure(store: StateStore) -> tuple[float, int, float, str]:
    ask = ask_once(store)
    answer = ask()  # warm
    counted = Counted(store)
    ask()
    read = counted.read
    times = []
    for _ in range(7):
        t0 = time.perf_counter()
        ask()
        times.append(time.perf_counter() - t0)
    tracemalloc.start()
    ask()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return statistics.median(times), read, peak / 1024**2, answer.verdict


def sqlite_store(total: int, folder: Path) -> object:
    from platformctl.kernel.state.sqlite import SQLiteStore

    store = SQLiteStore(folder / f"results-{total}.db")
    for stream, rows in history(total).items():
        store.append_many(stream, rows)
    return store


def dynamodb_store(total: int) -> object:
    from platformctl.kernel.state.dynamodb import DynamoDBStore, create_table

    table = f"results-{total}"
    create_table(table)
    store = DynamoDBStore(table)
    for stream, rows in history(total).items():
        store.bulk_load(stream, rows)
    return store


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--big", type=int, default=1_000_000)
    parser.add_argument("--small", type=int, default=20_000)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="gate-window-"))
    os.environ.update({"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-west-2"})
    os.environ.pop("AWS_ENDPOINT_URL", None)
    from moto import mock_aws

    with mock_aws():
        for name, make in (("sqlite", lambda n: sqlite_store(n, folder)), ("dynamodb (moto)", dynamodb_store)):
            figures = {}
            for total in (args.small, args.big):
                t0 = time.perf_counter()
                store = make(total)
                built = time.perf_counter() - t0
                seconds, read, mib, verdict = measure(store)
                figures[total] = (seconds, read, mib)
                print(f"{name}: {total:>9,} results ({built:.0f} s to store): one gate ask {seconds * 1000:.1f} ms, "
                      f"{read:,} records read, peak {mib:.1f} MiB, verdict {verdict}")
                del store
            (t_small, r_small, m_small), (t_big, r_big, m_big) = figures[args.small], figures[args.big]
            print(f"{name}: ratios {args.big:,} / {args.small:,} results: time {t_big / t_small:.2f}x, records read "
                  f"{r_big / r_small:.2f}x, peak memory {m_big / m_small:.2f}x   (target <= 2x)")


if __name__ == "__main__":
    main()
