"""`--help` of both programs is grouped by subject (issue 26: 213 ungrouped lines were hard to
read): every flag but --help, --version and --config sits in a titled group, and each default is
said once, by the formatter."""

from __future__ import annotations

import argparse

import pytest

from gpuextender.agent.settings import build_parser as agent_parser
from gpuextender.extender.flags import build_parser as extender_parser

UNGROUPED = {"-h", "--help", "--version", "--config"}


@pytest.mark.parametrize("build", [agent_parser, extender_parser], ids=["gpu-agent", "gpu-extender"])
def test_every_flag_is_in_a_titled_group(build: object) -> None:
    parser: argparse.ArgumentParser = build()  # type: ignore[operator]
    top = {"options", "optional arguments", "positional arguments"}
    grouped = {
        flag
        for group in parser._action_groups
        if group.title not in top
        for action in group._group_actions
        for flag in action.option_strings
    }
    every = {flag for action in parser._actions for flag in action.option_strings}
    assert every - grouped == UNGROUPED, sorted(every - grouped - UNGROUPED)
    titles = [g.title for g in parser._action_groups if g.title not in top]
    assert len(titles) >= 5 and len(set(titles)) == len(titles)
    text = parser.format_help()
    for title in titles:
        assert f"\n{title}:\n" in text
    for action in parser._actions:  # a default said in the help text is not said again by the formatter
        shown = " ".join(parser._get_formatter()._format_action(action).split())
        assert shown.count("(default") <= 1, shown
