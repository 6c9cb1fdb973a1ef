"""The examples in the training modules' docstrings run (``training`` is not among the
packages pytest collects doctests from)."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "training.traces",
    "training.data",
    "training.collect",
    "training.rewards",
    "training.rollouts",
    "training.grpo",
    "training.runs",
    "training.pipeline",
    "training.verl_loop",
    "training.common",
    "training.sft",
    "training.lora",
    "training.cli",
    "training.cli_settings",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
