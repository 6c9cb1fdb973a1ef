"""Run the docstring examples of ``experiments.tiny_models``'s model-building modules, also
when pytest is given only this folder (the addition task's are in
``scaffolds.evaluation.addition_task``, run with ``scaffolds``)."""

from __future__ import annotations

import doctest
import importlib

import pytest

pytest.importorskip("transformers")


@pytest.mark.parametrize("name", ["tokenizer", "model", "train", "think_train"])
def test_demo_module_doctests(name: str) -> None:
    module = importlib.import_module(f"experiments.tiny_models.{name}")
    failures, tried = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert tried > 0
    assert failures == 0
