"""An answer's ``Date`` header formatted once a second (``atomq.node.answer_date``): the text
gunicorn's own ``http_date`` gives, for the second it is asked in."""

from __future__ import annotations

import email.utils

import pytest
from gunicorn import util

from atomq.node import answer_date


def test_the_text_is_gunicorns_for_the_second_asked_in(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1_795_000_000.25]
    monkeypatch.setattr(answer_date.time, "time", lambda: now[0])
    first = answer_date.http_date()
    now[0] = 1_795_000_000.99
    assert answer_date.http_date() == first == email.utils.formatdate(1_795_000_000, usegmt=True)
    now[0] = 1_795_000_001.0
    assert answer_date.http_date() == email.utils.formatdate(1_795_000_001, usegmt=True) != first


def test_a_time_given_is_formatted_as_given() -> None:
    assert answer_date.http_date(86_400.5) == email.utils.formatdate(86_400.5, usegmt=True)


def test_installed_it_is_what_gunicorn_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(util, "http_date", util.http_date)  # put back after the test
    answer_date.install()
    assert util.http_date is answer_date.http_date
