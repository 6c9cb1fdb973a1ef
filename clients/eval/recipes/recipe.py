"""What a recipe is: one paper's reported setting, as Ponder serves and evaluates it.

A :class:`Recipe` is frozen and typed. It holds what ``ponder serve`` is started with
(:class:`Served`: the spec, the sampling its requests send, how answers are read, the
prompt-file keys the user fills from the reference repository, extra serve flags, the
time limit, none by default), what ``ponder eval`` runs (:class:`Evaluation`: the
dataset, samples per problem, grader, metrics), the paper's number (:class:`Reported`)
and ``differs``: what still differs from the reference run, said wherever the recipe is
listed.

>>> recipe = Recipe(
...     name="toy",
...     title="a toy",
...     reference="https://example.org/toy",
...     served=Served("majority(k=2)", Sampling(temperature=1.0)),
...     evaluation=Evaluation("gsm8k", samples=1, metrics=("accuracy",)),
...     reported=Reported("50% on GSM8K", "a paper, Table 1"),
...     sources=("toy.py:1 (k)",),
...     differs=("everything",),
... )
>>> recipe.served.sampling.request_fields()
{'temperature': 1.0}
>>> recipe.command()
'ponder eval --recipe toy --engine URL --out runs/toy'
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Literal

__all__ = ["Evaluation", "PromptKey", "Recipe", "Reported", "Sampling", "Served"]


@dataclass(frozen=True, slots=True)
class PromptKey:
    """A template or text a prompt file must set for the recipe, and where the reference
    keeps that wording (Ponder ships none of a paper's prompt text).

    >>> PromptKey("rsa_aggregate", "HyperPotatoNeo/RSA eval_loop.py:145").name
    'rsa_aggregate'
    """

    name: str
    """The template's (or text's) name in a prompt file."""
    source: str
    """Where the reference repository keeps the wording: repository, file and line."""


@dataclass(frozen=True, slots=True)
class Sampling:
    """The request fields every engine call of the run is sampled with (None: not sent,
    the server's or engine's default).

    >>> Sampling(temperature=0.0, max_tokens=10).request_fields()
    {'temperature': 0.0, 'max_tokens': 10}
    """

    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    max_tokens: int | None = None

    def request_fields(self) -> dict[str, float | int]:
        """The fields that are set, by their request name."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        return {name: value for name, value in values.items() if value is not None}


@dataclass(frozen=True, slots=True)
class Served:
    """What the ``ponder serve`` in front of the user's engine runs."""

    spec: str
    """The scaffold spec each request names."""
    sampling: Sampling
    """The request's sampling fields (the same for every step of the run)."""
    answer_format: str = "boxed"
    """How the server's votes and the grade read a sample's answer."""
    prompt_keys: tuple[PromptKey, ...] = ()
    """What the user's prompt file must set (empty: no prompt file is needed)."""
    serve_flags: tuple[str, ...] = ()
    """More ``ponder serve`` flags the setting needs (a thinking marker, a cap raised)."""
    reward_model: bool = False
    """The spec scores steps with a reward model: ``--reward-url`` is required."""
    timeout_s: float | None = None
    """Seconds a request may run, on the server and the client; None: no time limit."""


@dataclass(frozen=True, slots=True)
class Evaluation:
    """What ``ponder eval`` runs and reports."""

    dataset: str
    """A benchmark Ponder knows by name, or a Hugging Face dataset ``owner/name``."""
    samples: int
    """Samples per problem (independent runs of the spec)."""
    metrics: tuple[str, ...]
    """What the paper reports, as ``ponder eval``'s report names it."""
    split: str = "test"
    """The split of a Hugging Face dataset."""
    grader: Literal["math", "exact", "judge"] = "math"
    """How answers are graded (``judge``: ``--judge-url`` and ``--judge-model``)."""


@dataclass(frozen=True, slots=True)
class Reported:
    """The paper's number for this setting, and where it says so."""

    number: str
    citation: str


@dataclass(frozen=True, slots=True)
class Recipe:
    """One reported setting of a paper, runnable by name:
    ``ponder eval --recipe NAME --engine URL --prompt-file FILE``."""

    name: str
    """The name ``--recipe`` takes."""
    title: str
    """The method and setting, in words."""
    reference: str
    """The reference code's repository (or the paper, where no code is published)."""
    served: Served
    evaluation: Evaluation
    reported: Reported
    sources: tuple[str, ...]
    """Where each setting comes from: the reference's file and line."""
    differs: tuple[str, ...] = ()
    """What still differs from the reference run (empty: nothing known)."""

    def command(self) -> str:
        """The command line that runs it (``FILE`` only when prompt keys are needed)."""
        prompt = " --prompt-file FILE" if self.served.prompt_keys else ""
        reward = " --reward-url URL" if self.served.reward_model else ""
        judge = " --judge-url URL --judge-model NAME" if self.evaluation.grader == "judge" else ""
        given = f"--engine URL{prompt}{reward}{judge}"
        return f"ponder eval --recipe {self.name} {given} --out runs/{self.name}"
