"""Run the docstring examples of ``experiments.tiny_models`` (pytest's doctest run covers only the
packages in ``testpaths``, which ``training`` is not)."""

from __future__ import annotations

import doctest
import importlib

import pytest

pytest.importorskip("transformers")


@pytest.mark.parametrize("name", ["task", "tokenizer", "model", "train", "think_train"])
def test_demo_module_doctests(name: str) -> None:
    module = importlib.import_module(f"experiments.tiny_models.{name}")
    failures, tried = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert tried > 0
    assert failures == 0
