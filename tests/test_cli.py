"""`kennel --help` and each verb's help read as plain text, with every default shown."""

from __future__ import annotations

import argparse

import pytest
from kennel.cli import VERBS, build_parser


def _sub(parser: argparse.ArgumentParser, *names: str) -> argparse.ArgumentParser:
    for name in names:
        action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = action.choices[name]
    return parser


def test_top_level_help_is_plain_text():
    text = build_parser().format_help()
    assert "``" not in text and "kennel VERB --help" in text
    for verb in VERBS:
        assert verb in text


@pytest.mark.parametrize(
    "path, shown",
    [
        (("classify",), ["--batch-size", "(default: 1024)", "(default: 0)"]),
        (("simulate", "trna"), ["(default: 1000)", "(default: 1)", "(default: demo)"]),
        (("extract",), ["(default: 12)", "(default: center)"]),
    ],
)
def test_verb_help_describes_the_verb_and_shows_defaults(path, shown):
    parser = _sub(build_parser(), *path)
    text = parser.format_help()
    assert parser.description, path  # nested sub-commands too
    for fragment in shown:
        assert fragment in text, (path, fragment)
    assert "(default: None)" not in text and "(default: False)" not in text
