"""The README a newcomer reads first (issue 26, "Finding things"): it starts with the two commands,
and its table of contents lists every section by the anchor GitHub gives its heading."""

from __future__ import annotations

import re

from tests.harness import ROOT

README = (ROOT / "README.md").read_text()


def github_anchor(title: str) -> str:
    """GitHub's heading anchor: lower case, punctuation but hyphens dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")


def test_it_starts_with_the_demo_and_the_tests() -> None:
    first = README.split("```sh\n", 1)[1].split("```", 1)[0].splitlines()
    assert [line.split()[:2] for line in first] == [["./dev.sh", "demo"], ["./dev.sh", "test"]]


def test_the_contents_list_every_section_by_its_anchor() -> None:
    contents = README.split("## Contents\n", 1)[1].split("\n## ", 1)[0]
    listed = re.findall(r"^\s*- \[(.+)\]\(#([^)]+)\)$", contents, re.M)
    headings = [m.group(2) for m in re.finditer(r"^(#{2,4}) (.+)$", README, re.M) if m.group(2) != "Contents"]
    assert [title for title, _ in listed] == headings
    assert all(anchor == github_anchor(title) for title, anchor in listed), listed


def test_every_relative_link_of_the_docs_leads_to_a_file() -> None:
    """README.md, docs/ and deploy/README.md link files by relative path (docs/ one level down):
    a move of a file or of the reference into docs/ must not leave a link behind."""
    pages = [
        ROOT / "README.md",
        ROOT / "deploy" / "README.md",
        ROOT / "CHANGELOG.md",
        *sorted((ROOT / "docs").glob("*.md")),
    ]
    broken = []
    for page in pages:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
            if re.match(r"^(https?:|mailto:|#)", target):
                continue
            path = (page.parent / target.split("#", 1)[0]).resolve()
            if not path.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert not broken, broken
    assert len(pages) >= 7  # the docs/ pages are there


# Italics of the docs that are emphasis, not the name of a section.
EMPHASIS = {"a", "land blind", "where", "Unclassified", "Where would this pod go?", "where would this pod go?", "_pb2"}


def test_every_section_the_docs_name_in_italics_exists() -> None:
    """README.md and deploy/README.md point at sections by name in italics ("*Images* below",
    "bench/RESULTS.md, *Fleet scale II*"): each names a heading (or a bold run-in heading) of one of
    the repository's pages, whole or as its first words (issue 50: "*Images* below" named none)."""
    pages = [p for p in ROOT.rglob("*.md") if ".venv" not in p.parts and "node_modules" not in p.parts]
    titles = set()
    for page in pages:
        text = page.read_text()
        titles |= {m.group(1).strip() for m in re.finditer(r"^#{1,6} (.+)$", text, re.M)}
        titles |= set(re.findall(r"\*\*([^*\n]+?)\*\*", text))
    missing = []
    for doc in ("README.md", "deploy/README.md"):
        for name in set(re.findall(r"(?<![*\w])\*([^*\n]+?)\*(?![*\w])", (ROOT / doc).read_text())) - EMPHASIS:
            if not any(t == name or re.match(re.escape(name) + r"[\s:,.(]", t) for t in titles):
                missing.append(f"{doc}: *{name}*")
    assert not missing, missing
