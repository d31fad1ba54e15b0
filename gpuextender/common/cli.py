"""Command-line help shared by both programs."""

from __future__ import annotations

import argparse

from gpuextender import __version__


def add_version(parser: argparse.ArgumentParser) -> None:
    """--version on every entry point: "<prog> <installed version>", exit 0."""
    parser.add_argument(
        "--version", action="version", version=f"%(prog)s {__version__}", help="print the installed version and exit"
    )


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows `(default: X)` only where there is a meaningful default to show."""

    def _get_help_string(self, action: argparse.Action) -> str:
        help_text = action.help or ""
        if action.default in (None, [], "", False) or "default:" in help_text:
            return help_text
        return super()._get_help_string(action) or help_text
