"""The property tests' hypothesis profiles (tests/conftest.py) time nothing: an example
slowed by a busy machine is not a failure."""

from __future__ import annotations

from hypothesis import settings


def test_no_profile_has_a_per_example_deadline():
    assert settings().deadline is None
    assert settings.get_profile("default").deadline is None
    assert settings.get_profile("ci").deadline is None


def test_the_ci_profile_draws_the_same_examples_every_run():
    ci = settings.get_profile("ci")
    assert ci.derandomize and ci.database is None
