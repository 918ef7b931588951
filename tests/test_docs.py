"""The user documentation: a README short enough to follow (at most 300 lines),
every relative link in README.md and docs/*.md resolving (files, and
``#anchors`` to a heading of the file they name, as GitHub makes them), the
README's test command the one ``.ci/run`` runs, and the generated tables in
docs/agents.md being what their scripts write."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
MAX_README_LINES = 300

#: Inline links and images: ``[text](target)`` / ``![alt](target "title")``.
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_FENCE = re.compile(r"^\s*(```|~~~)")


def _prose(text: str) -> str:
    """``text`` without fenced code blocks and inline code spans (links there are not links)."""
    out, fenced = [], False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            out.append(re.sub(r"`[^`]*`", "", line))
    return "\n".join(out)


def slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading: lower case, inline markup and
    punctuation dropped (letters, digits, ``-``, ``_`` and spaces kept),
    spaces to hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading: its text
    text = text.replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a Markdown file (duplicates get ``-1``, ``-2``, as on GitHub)."""
    seen: dict[str, int] = {}
    out = set()
    fenced = False
    for line in path.read_text().splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        m = re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", line)
        if fenced or not m:
            continue
        base = slug(m.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(path: Path) -> list[str]:
    """The relative link targets of a Markdown file (not ``http(s)://``, ``mailto:``)."""
    return [t for t in _LINK.findall(_prose(path.read_text()))
            if not re.match(r"^[a-z][a-z0-9+.-]*:", t, re.I)]


def broken(path: Path, root: Path = ROOT) -> list[str]:
    """The links of ``path`` that do not resolve (or leave ``root``), each with why."""
    bad = []
    for target in links(path):
        file_part, _, frag = target.partition("#")
        dest = (path.parent / unquote(file_part)).resolve() if file_part else path
        if not dest.exists():
            bad.append(f"{target}: no such file")
        elif root not in dest.parents and dest != root:
            bad.append(f"{target}: outside the repository")
        elif frag and dest.suffix == ".md" and unquote(frag).lower() not in anchors(dest):
            bad.append(f"{target}: no heading #{frag} in {dest.relative_to(root)}")
    return bad


def test_readme_is_at_most_300_lines():
    n = len(README.read_text().splitlines())
    assert n <= MAX_README_LINES, f"README.md has {n} lines; the reference belongs in docs/"


@pytest.mark.parametrize("path", [README, *DOCS], ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(path):
    assert links(path) or path != README, "README.md links nothing: the checker reads no links"
    assert broken(path) == [], f"{path.relative_to(ROOT)}: broken links"


def test_readme_links_every_docs_file():
    """Each docs file is reachable from the README."""
    linked = {(README.parent / t.partition("#")[0]).resolve() for t in links(README) if t.partition("#")[0]}
    assert [p.name for p in DOCS if p.resolve() not in linked] == []


def test_link_checker_sees_broken_links(tmp_path):
    """The checker itself: a missing file and a missing anchor are reported, good ones are not."""
    (tmp_path / "a.md").write_text("# Title\n\n## It's `here` (yes)\n\n```\n[no](in-code.md)\n```\n"
                                   "[ok](#its-here-yes) [bad](#nowhere) [gone](missing.md) "
                                   "[web](https://example.com) `[code](x.md)`\n")
    assert broken(tmp_path / "a.md", root=tmp_path) == [
        "#nowhere: no heading #nowhere in a.md", "missing.md: no such file"]


def test_readme_test_command_is_the_ci_command():
    """The README's test command is the line .ci/run runs, so the README's promise is what CI checks."""
    ci = [ln.strip() for ln in (ROOT / ".ci" / "run").read_text().splitlines()
          if ln.strip().startswith("python3 -m venv")]
    assert len(ci) == 1, ci
    blocks = re.findall(r"```sh\n(.*?)```", README.read_text(), re.S)
    assert any(ci[0] in b.splitlines() for b in blocks), f"README has no code line {ci[0]!r}"


def test_generated_tables_are_what_their_scripts_write():
    """docs/agents.md holds both generated tables between their markers, and the
    agents table is what tests/agents/readme_table.py makes from last_run.json."""
    sys.path.insert(0, str(ROOT / "tests" / "agents"))
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import readme_table
    finally:
        sys.path.pop(0)
        sys.path.pop(0)
    text = readme_table.TARGET.read_text()
    assert readme_table.TARGET == ROOT / "docs" / "agents.md"
    for marker in ("<!-- accuracy:begin -->", "<!-- accuracy:end -->", readme_table.BEGIN, readme_table.END):
        assert text.count(marker) == 1, marker
    data = json.loads((ROOT / "tests" / "agents" / "last_run.json").read_text())
    assert readme_table.render(text, data) == text, \
        "docs/agents.md differs from last_run.json: run python3 tests/agents/readme_table.py"
    for marker in ("accuracy:begin", "agents-table:begin"):
        assert marker not in README.read_text(), f"{marker}: the generated tables live in docs/agents.md"
