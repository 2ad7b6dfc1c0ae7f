"""The README's and the manual's commands exist as they spell them: every `platformctl …` line of their code blocks
names commands the CLI has, and every flag it shows is one that command takes; the README stays short and every
link in it and in docs/ leads to a file that exists."""

from __future__ import annotations

import re
from pathlib import Path

import click

from platformctl.cli import cli

ROOT = Path(__file__).parents[1]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
CTX = click.Context(cli)


def _command_lines() -> list[str]:
    lines = []
    for page in PAGES:
        block = False
        for line in page.read_text().splitlines():
            if line.startswith("```"):
                block = not block
                continue
            line = line.removeprefix(".venv/bin/")
            if block and line.startswith("platformctl "):
                lines.append(line.split("  #", 1)[0].split(" # ", 1)[0].strip().rstrip("\\").strip())
    return lines


def _commands(line: str) -> list[tuple[click.Command, str]]:
    """The commands a synopsis line names (``rotate status|pause``, ``local up … | status | down …``) with the
    text of their arguments."""
    words = line.split()[1:]
    group: click.Command = cli
    while words and isinstance(group, click.Group):
        head = words[0]
        names = head.split("|")
        if all(isinstance(group, click.Group) and group.get_command(CTX, n) for n in names) and len(names) > 1:
            rest = " ".join(words[1:])
            return [(group.get_command(CTX, n), rest) for n in names]  # type: ignore[union-attr, misc]
        sub = group.get_command(CTX, head) if isinstance(group, click.Group) else None
        if sub is None or not isinstance(sub, click.Group):
            break
        group = sub
        words = words[1:]
    assert isinstance(group, click.Group), line
    if words and words[0].startswith("-") and group.invoke_without_command:
        return [(group, " ".join(words))]  # a group that runs by itself (`remediate --policy …`)
    out: list[tuple[click.Command, str]] = []
    for segment in " ".join(words).split(" | "):
        first = segment.split()[0] if segment.split() else ""
        sub = group.get_command(CTX, first)
        if sub is not None:
            out.append((sub, segment[len(first):]))
        else:
            assert out, f"README: {line!r}: {first!r} is not a command of {group.name}"
            out[-1] = (out[-1][0], out[-1][1] + " " + segment)
    return out


def test_every_command_the_readme_shows_exists_with_its_flags() -> None:
    lines = _command_lines()
    assert len(lines) > 20
    for line in lines:
        for command, args in _commands(line):
            runs = not isinstance(command, click.Group) or command.invoke_without_command
            assert runs, f"README: {line!r} names no command"
            flags = {opt for p in command.params for opt in (*p.opts, *p.secondary_opts)} | {"--help", "-h"}
            for flag in re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*)", args):
                assert flag in flags, f"README: {line!r}: {command.name} has no {flag}"


def test_the_readme_is_short_and_every_link_leads_somewhere() -> None:
    assert len(README.read_text().splitlines()) <= 200
    for page in PAGES:
        for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", page.read_text()):
            if "://" not in target:
                assert (page.parent / target).exists(), f"{page.relative_to(ROOT)}: link to {target} leads nowhere"


def test_the_policy_reference_is_the_one_the_models_generate() -> None:
    from platformctl.cli.reference import render

    page = ROOT / "docs" / "policy-reference.md"
    assert page.read_text() == render(), "docs/policy-reference.md is stale: python -m platformctl.cli.reference > docs/policy-reference.md"
