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
