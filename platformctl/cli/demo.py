"""``platformctl demo`` and ``demo-pipeline`` on screen: a narrator that renders the stories of
``platformctl.app.demo`` with rich, and the stage story's ending. The stories themselves live in the application layer.
"""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from platformctl.app.demo.narration import Marked, Part, Tabular, Tone
from platformctl.app.demo.stage import DemoReport

STYLE = {Tone.HEADING: "bold", Tone.GOOD: "green", Tone.BAD: "red", Tone.ASIDE: "dim"}


def markup(part: Part) -> str:
    if isinstance(part, Marked):
        return f"[{STYLE[part.tone]}]{escape(part.text)}[/]"
    return escape(part)


def table_of(tabular: Tabular) -> Table:
    table = Table(*tabular.columns, title=tabular.title)
    for row in tabular.rows:
        table.add_row(*(escape(cell) for cell in row))
    return table


class RichNarrator:
    """The stories on a terminal: a heading in bold, good news green, bad news red, tables as tables, and a bar
    for a stretch of virtual time."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self._progress: Progress | None = None
        self._tasks: dict[str, TaskID] = {}

    def say(self, *parts: Part) -> None:
        self._end_progress()
        self.console.print("".join(markup(p) for p in parts), soft_wrap=True)

    def show(self, table: Tabular) -> None:
        self._end_progress()
        self.console.print(table_of(table))

    def progress(self, label: str, done: float, total: float) -> None:
        if self._progress is None:
            self._progress = Progress(TextColumn("{task.description}"), BarColumn(),
                                      TextColumn("{task.completed:.0f}/{task.total:.0f} min"), TimeElapsedColumn(),
                                      console=self.console, transient=False)
            self._progress.start()
        if label not in self._tasks:
            self._tasks[label] = self._progress.add_task(escape(label), total=total)
        self._progress.update(self._tasks[label], completed=done, total=total)

    def _end_progress(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress, self._tasks = None, {}

    def close(self) -> None:
        self._end_progress()


def print_ending(report: DemoReport, console: Console) -> None:
    """What each cluster holds at the end, the story's events, and the invariants."""
    console.print()
    for line in report.story:
        console.print(f"• {escape(line)}")
    table = Table("cluster", "nodes (Ready)", "pods running", "pending", "pods started", "pods completed", title="At the end")
    for name, c in report.clusters.items():
        table.add_row(name, f"{c.nodes} ({c.nodes_ready})", str(c.pods_running), str(c.pods_pending), str(c.pods_started),
                      str(c.pods_succeeded))
    console.print(table)
    virtual = (report.virtual_end - report.virtual_start) / 60
    console.print(f"{virtual:.0f} virtual minutes in {report.wall_seconds:.1f} s of wall time. "
                  f"{report.evictions} evictions, {report.evictions_refused} refused with 429 and retried.")
    verdict = "[green]no eviction broke a PodDisruptionBudget[/]" if not report.budget_violations else \
        f"[red]{len(report.budget_violations)} evictions broke a PodDisruptionBudget[/]"
    console.print(f"Invariants from the event log: {verdict}; {report.pods_lost_with_node} pods went down with the failed instance "
                  f"and were recreated by their controllers.")
    for path in report.snapshots:
        console.print(f"Snapshot (kubectl get nodes,pods,pdb -A -o json format): {path}")
