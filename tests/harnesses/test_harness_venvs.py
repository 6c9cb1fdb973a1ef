"""A missing harness venv skips its test on a developer's machine and fails it in CI."""

from __future__ import annotations

import pytest

from tests.harnesses.conftest import harness_bin


def test_a_missing_harness_venv_fails_when_required(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PONDER_REQUIRE_HARNESSES", "1")
    with pytest.raises(pytest.fail.Exception, match="make harnesses"):
        harness_bin(".venv-no-such-harness", "run")


def test_a_missing_harness_venv_skips_otherwise(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PONDER_REQUIRE_HARNESSES", raising=False)
    with pytest.raises(pytest.skip.Exception, match="make harnesses"):
        harness_bin(".venv-no-such-harness", "run")
