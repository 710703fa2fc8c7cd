"""The command line the bench scripts share: a --help made of the script's own docstring, and the options
that mean the same in each.
"""

from __future__ import annotations

import argparse


def parser_from_doc(doc: str) -> argparse.ArgumentParser:
    """The docstring's first paragraph as the description, the rest as the epilog, laid out as written:
    a script's docstring is its manual."""
    description, epilog = doc.split("\n\n", 1)
    return argparse.ArgumentParser(description=description, epilog=epilog,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)


def add_http_workers(parser: argparse.ArgumentParser, default: int | None) -> None:
    """--http-workers W for the bench's ``atomq serve``; a default of None leaves the command its own."""
    shown = "its own default" if default is None else "%(default)s"
    parser.add_argument("--http-workers", type=int, default=default, metavar="W",
                        help=f"pass --http-workers W to atomq serve (default: {shown})")


def add_rounds(parser: argparse.ArgumentParser) -> None:
    """--messages N and --repeat R of the core benches (each checked to be at least 1 by ``check_rounds``)."""
    parser.add_argument("--messages", type=int, default=20_000, metavar="N",
                        help="messages per phase and repetition (default: %(default)s)")
    parser.add_argument("--repeat", type=int, default=3, metavar="R",
                        help="repetitions of each phase; the median is reported (default: %(default)s)")


def check_rounds(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.messages < 1:
        parser.error("--messages must be at least 1")
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
