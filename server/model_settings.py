"""One served model's settings, and the field types settings share.

:class:`ModelOptions` holds what one served model is (engines, prompt set, dialect,
scaffolds); :class:`ModelConfig` adds its name (a config file's ``models`` entries), and
:class:`~server.settings.Settings` inherits the same fields for its flat single-model
form (``ponder serve --model --engine``). :class:`~scaffolds.cli_options.Flag` is the
command-line metadata a field carries when its flag is not simply ``--field-name``.

>>> m = ModelConfig(name="m", engines="http://e:8000/v1/", aliases="g=gsr(n=2)")
>>> m.engines, m.alias_specs(), m.dialect
(('http://e:8000/v1',), {'m+g': 'gsr(n=2)'}, 'vllm')
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SecretStr,
    model_validator,
)
from pydantic_settings import NoDecode

from scaffolds.cli_options import Flag
from scaffolds.core.thinking import Thinking, thinking_off
from scaffolds.engines.dialects import check_dialect_name
from scaffolds.engines.factory import check_engine_url
from scaffolds.evaluation.answers import AnswerFormat, ThinkingMarkers

__all__ = [
    "DEFAULT_EFFORT_POLICY",
    "EFFORT_LEVELS",
    "DialectName",
    "EffortLevel",
    "EffortLevelName",
    "EffortPolicy",
    "EngineURLs",
    "ModelConfig",
    "ModelOptions",
    "parse_aliases",
]

PromptSetName = Literal["default", "compact"]


def split_list(value: Any, sep: str = ",") -> Any:
    """Comma-separated strings (env, or items of a list) or JSON lists to flat lists.

    >>> split_list("a, b"), split_list(["a,b", "c"])
    (['a', 'b'], ['a', 'b', 'c'])
    """
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            return json.loads(text)
        return [part.strip() for part in text.split(sep) if part.strip()]
    if isinstance(value, list | tuple):
        out: list[Any] = []
        for item in value:
            out.extend(split_list(item, sep) if isinstance(item, str) else [item])
        return out
    return value


def parse_aliases(value: Any) -> Any:
    """``NAME=SPEC`` items (a list, or one string separated by ``;`` or newlines) to a dict.

    >>> parse_aliases("gsr4=gsr(n=4, solver=single); rc=rc(steps=2)")
    {'gsr4': 'gsr(n=4, solver=single)', 'rc': 'rc(steps=2)'}
    """
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("{"):
            return json.loads(text)
        value = [p for p in text.replace("\n", ";").split(";") if p.strip()]
    if isinstance(value, list | tuple):
        out: dict[str, Any] = {}
        for item in value:
            if not isinstance(item, str) or "=" not in item:
                raise ValueError(f"alias must look like NAME=SPEC (got {item!r})")
            name, spec = item.split("=", 1)
            out[name.strip()] = spec.strip()
        return out
    return value


EngineURLs = Annotated[
    tuple[str, ...],
    BeforeValidator(split_list),
    AfterValidator(lambda urls: tuple(check_engine_url(url) for url in urls)),
    NoDecode,
]
"""Engine URLs (see :mod:`scaffolds.engines.factory`) from a list or a comma-separated
string, each checked."""

DialectName = Annotated[str, AfterValidator(check_dialect_name)]
"""A registered dialect's name (:func:`scaffolds.engines.dialects.dialect_names`)."""

Aliases = Annotated[dict[str, str], BeforeValidator(parse_aliases), NoDecode]

PromptFiles = Annotated[tuple[Path, ...], BeforeValidator(split_list), NoDecode]
"""Prompt files (:mod:`scaffolds.prompts.files`) from a list or a comma-separated string."""

ThinkingOff = Annotated[dict[str, Any], BeforeValidator(thinking_off), NoDecode]
"""A :data:`scaffolds.core.thinking.THINKING_OFF` preset name or a JSON object of request fields."""


EffortLevelName = Literal["minimal", "low", "medium", "high", "auto"]
"""A reasoning-effort level a request may ask for (``auto``: allocation per prompt, the
spec its policy names, the ``auto`` scaffold in the default policy)."""

EFFORT_LEVELS: tuple[EffortLevelName, ...] = ("minimal", "low", "medium", "high", "auto")
"""The levels, cheapest first (``auto`` last: it is not ordered by cost)."""


class EffortLevel(BaseModel):
    """What one effort level runs: a scaffold spec, and a budget of generated tokens for
    the whole run (None: only the spec's own limits and the server's cap).

    >>> EffortLevel(spec="majority(k=8)", budget=65536).budget
    65536
    """

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    spec: str = Field(min_length=1)
    """The scaffold spec the level runs, e.g. ``majority(k=8)``."""
    budget: int | None = Field(default=None, ge=1)
    """The most tokens the run generates, every call together (None: uncapped here)."""


class EffortPolicy(BaseModel):
    """A served model's map from reasoning effort to compute: per level, a spec and a
    budget (:class:`EffortLevel`). Requests select a level with chat's
    ``reasoning_effort``, Responses' ``reasoning.effort`` or Messages'
    ``thinking.budget_tokens`` (:meth:`for_budget`); a request that names a scaffold runs
    that scaffold instead. ``auto`` may be left out: it then runs ``high``'s entry.

    The budgets of ``minimal`` to ``high`` may not fall as the level rises (None, no
    cap, counts as the largest). In a config file (or a file named by
    ``effort_policy:``, the file the calibration command writes):

    .. code-block:: yaml

        minimal: {spec: single, budget: 8192}
        low: {spec: "majority(k=4)", budget: 32768}
        medium: {spec: "majority(k=8)", budget: 65536}
        high: {spec: "adaptive(max_k=16, wave=4)", budget: 131072}

    >>> policy = EffortPolicy.model_validate({
    ...     "minimal": {"spec": "single", "budget": 1000},
    ...     "low": {"spec": "majority(k=4)", "budget": 4000},
    ...     "medium": {"spec": "majority(k=8)", "budget": 8000},
    ...     "high": {"spec": "majority(k=16)"}})
    >>> policy.level("auto").spec, policy.for_budget(3000), policy.for_budget(10**6)
    ('majority(k=16)', 'low', 'high')
    """

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    minimal: EffortLevel
    """The cheapest level (OpenAI's ``minimal``)."""
    low: EffortLevel
    medium: EffortLevel
    high: EffortLevel
    auto: EffortLevel | None = None
    """Allocation per prompt: the spec it runs (``ponder calibrate`` writes ``auto(...)``
    with calibrated thresholds); left out, ``high``'s entry."""

    @model_validator(mode="after")
    def _budgets_rise(self) -> EffortPolicy:
        previous: tuple[str, float] | None = None
        for name in EFFORT_LEVELS[:-1]:
            budget = self.level(name).budget
            size = float("inf") if budget is None else float(budget)
            if previous is not None and size < previous[1]:
                raise ValueError(
                    f"{name}.budget ({budget}) is below {previous[0]}.budget: a level's "
                    "budget may not fall as the effort rises"
                )
            previous = (name, size)
        return self

    def level(self, name: EffortLevelName) -> EffortLevel:
        """The entry of level ``name`` (``auto``: its own, else ``high``'s)."""
        entry: EffortLevel | None = getattr(self, name)
        return entry if entry is not None else self.high

    def for_budget(self, tokens: int) -> EffortLevelName:
        """The cheapest level whose budget covers ``tokens`` (a thinking budget), else
        ``high``: the first spec that can spend the whole budget, which the run is then
        capped at."""
        for name in EFFORT_LEVELS[:-1]:
            budget = self.level(name).budget
            if budget is None or budget >= tokens:
                return name
        return "high"

    @classmethod
    def from_file(cls, path: Path) -> EffortPolicy:
        """The policy in a YAML, JSON or TOML file; a ValueError naming the file if it is
        missing or malformed."""
        try:
            text = path.read_text()
        except OSError as exc:
            raise ValueError(f"effort_policy: cannot read {str(path)!r} ({exc})") from None
        try:
            if path.suffix.lower() == ".toml":
                data: Any = tomllib.loads(text)
            else:
                data = yaml.safe_load(text)
        except (tomllib.TOMLDecodeError, yaml.YAMLError) as exc:
            raise ValueError(f"effort_policy: {str(path)!r} is not valid ({exc})") from None
        return cls.model_validate(data)


def effort_policy_value(value: Any) -> Any:
    """An effort policy given inline (a mapping, or a JSON object as text) or as a file
    path (text or ``Path``), to what :class:`EffortPolicy` validates.

    >>> effort_policy_value('{"minimal": {"spec": "single"}}')
    {'minimal': {'spec': 'single'}}
    """
    if isinstance(value, str) and value.strip().startswith("{"):
        return json.loads(value)
    if isinstance(value, str | Path):
        return EffortPolicy.from_file(Path(value))
    return value


EffortPolicyField = Annotated[EffortPolicy | None, BeforeValidator(effort_policy_value), NoDecode]
"""An :class:`EffortPolicy` inline or from a file (:func:`effort_policy_value`)."""

DEFAULT_EFFORT_POLICY = EffortPolicy(
    minimal=EffortLevel(spec="single", budget=8192),
    low=EffortLevel(spec="majority(k=4)", budget=32768),
    medium=EffortLevel(spec="majority(k=8)", budget=65536),
    high=EffortLevel(spec="adaptive(max_k=16, wave=4)", budget=131072),
    auto=EffortLevel(spec="auto", budget=131072),
)
"""The embedded default models' policy, from the committed rows of experiments/RESULTS.md
(the shipped addition model, T=1, 1,000 problems x 3 seeds in Part 1 and 150 x 2 in
issue 19's voting study; accuracy, generated tokens per problem):

- ``minimal``: ``single``, 0.394 at 4.6 tokens (Part 1);
- ``low``: ``majority(k=4)``, 0.462 at 18.4 (+6.8 pt over single, [+4.6, +9.0]; Part 1);
- ``medium``: ``majority(k=8)``, 0.511 at 36.7 (+11.7 pt over single; Part 1);
- ``high``: ``adaptive(max_k=16, wave=4)``, 0.530 at 60.8 tokens against
  ``majority(k=16)``'s 0.537 at 73.4 (-0.7 pt [-5.6, +4.2], 17% fewer tokens; issue 19).

On SmolLM2-135M-Instruct (run 1's base, 500 problems x 3 seeds, 256 tokens a call) the
vote helps too: ``single`` 0.135 at 43.9 tokens, four samples' vote 0.170 at 173.9.
``auto`` runs the ``auto`` scaffold with its provisional thresholds (a pilot of 4, up to
16 samples): in the effort-frontier study (experiments/RESULTS.md, resampled from the
committed SmolLM2 samples, held-out half) it beats ``majority(k=8)`` on the base model by
+0.022 [+0.008, +0.035] (``max_k=12``, that pool's size) and matches ``majority(k=16)``
on ``smollm2-135m-gsr`` at 0.70 of its tokens. Budgets allow 8,192 generated tokens per
sample of the level's largest draw (a GPU model's long answers; they
cap no measured run). The calibration command's output replaces these numbers with a
model's own."""


def check_alias_names(model: str, aliases: Mapping[str, str]) -> None:
    """Alias names are non-empty without spaces, and each has a spec."""
    for name, spec in aliases.items():
        short = name.removeprefix(f"{model}+")
        if not short or any(c.isspace() for c in short):
            raise ValueError(f"alias name {name!r} must be non-empty without spaces")
        if not spec.strip():
            raise ValueError(f"alias {name!r} has an empty spec")


class ModelOptions(BaseModel):
    """What one served model is, apart from its name (shared by both model forms)."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    engines: Annotated[EngineURLs, Flag("--engine", "URL", repeat=True)] = ()
    """Engine base URL ending in /v1 (vLLM, SGLang, any OpenAI-compatible server), or
    local:DIR for a model directory run in process; repeat for replicas (env:
    comma-separated)."""
    engine_model: Annotated[str | None, Flag(metavar="NAME")] = None
    """Model name the engines serve (default: --model)."""
    engine_api_key: Annotated[SecretStr | None, Flag(metavar="KEY")] = None
    """The engines' own API key (never a client's)."""
    prompts: Annotated[PromptSetName, Flag(metavar="SET")] = "default"
    """Prompt set the model was trained with: default or compact."""
    prompt_files: Annotated[PromptFiles, Flag("--prompt-file", "PATH", repeat=True)] = ()
    """YAML or TOML file of templates (and fixed texts) put in place of Ponder's own
    wording, e.g. a paper's prompts for a model trained on them; checked at start;
    repeatable, later files win (env: comma-separated)."""
    default_scaffold: Annotated[str, Flag(metavar="SPEC")] = "single"
    """Scaffold when a request names none."""
    aliases: Annotated[Aliases, Flag("--alias", "NAME=SPEC", repeat=True)] = Field(
        default_factory=dict
    )
    """Scaffold alias listed in /v1/models as MODEL+NAME, e.g. gsr4='gsr(n=4)';
    repeatable (env: separated by ';')."""
    dialect: Annotated[DialectName, Flag(metavar="NAME")] = "vllm"
    """How the engines differ from OpenAI's API: a registered dialect (vllm, sglang,
    openai)."""
    responses_api: Literal["auto", "on", "off"] = "auto"
    """Whether `single` on /v1/responses goes to the engine's own /v1/responses (Ponder
    keeps the ids and the stored conversation): auto tries it and, answered 404 or 405,
    builds such requests on chat completions from then on; off always does."""
    reward_url: Annotated[str | None, Flag(metavar="URL")] = None
    """A reward model's vLLM pooling endpoint (http://host:port/pooling): the model's
    verifier (best_of_n(judge="verifier"), majority(weight="verifier"), beam,
    particle_filter)."""
    reward_model: Annotated[str | None, Flag(metavar="NAME")] = None
    """Model name the reward endpoint serves (default: --model)."""
    reward_step_tag: Annotated[str | None, Flag(metavar="TEXT")] = None
    """What a process reward model reads after each step, to score it (<extra_0> for
    Qwen2.5-Math-PRM); unset: it scores the whole text."""
    verifier: Annotated[str | None, Flag(metavar="NAME|local:DIR")] = None
    """The model's verifier, when it has no --reward-url: a served model's name (asked
    whether a solution is right, read from its yes/no logprobs), or local:DIR (a
    transformers model in process; DIR may be a known model's name, e.g.
    local:smollm2-135m-verifier)."""
    verifier_max_batch: Annotated[int | None, Field(ge=1), Flag(metavar="N")] = None
    """Rows (candidates, or a process verifier's step prefixes) per forward pass of a
    local:DIR verifier; concurrent runs' calls share forwards up to it (default: 256,
    what vLLM batches by default; a forward's memory grows with its rows times their
    length)."""
    default_max_tokens: int | None = Field(default=None, ge=1)
    """max_tokens per engine call when a request sets none."""
    default_temperature: float | None = Field(default=None, ge=0, le=2)
    """temperature when a request sets none (a model's recommended sampling, as vLLM
    takes it from generation_config.json; default: the engine's own)."""
    default_top_p: float | None = Field(default=None, gt=0, le=1)
    """top_p when a request sets none (default: the engine's own)."""
    max_model_len: Annotated[int | None, Field(ge=1), Flag(metavar="TOKENS")] = None
    """The model's context length; each call's max_tokens is lowered to what it leaves
    after the prompt (default: what the engine reports, as vLLM does in /v1/models)."""
    thinking: Annotated[bool, Flag("--thinking", off="--no-thinking")] = False
    """The model thinks before it answers (<think>...</think>), whether or not the
    engine's reasoning parser separates the thinking."""
    thinking_off: Annotated[ThinkingOff, Flag(metavar="PRESET|JSON")] = Field(default_factory=dict)
    """What a helper step (summary, feedback, abstraction, judge) adds to its engine
    request to turn thinking off: qwen3 (chat_template_kwargs.enable_thinking=false),
    gpt-oss (reasoning_effort=low), none, or a JSON object of request fields."""
    thinking_start: Annotated[str, Field(min_length=1), Flag(metavar="TEXT")] = "<think>"
    """The model's start-of-thinking marker, where its thinking opens in a text
    (<|begin_of_thought|> for OpenThoughts models)."""
    thinking_end: Annotated[str, Field(min_length=1), Flag(metavar="TEXT")] = "</think>"
    """The model's end-of-thinking marker (a forced answer closes the thinking with it)."""
    max_sequences: Annotated[int | None, Field(ge=1), Flag(metavar="N")] = None
    """Sequences (samples) in flight to this model's engines at once, over all its
    replicas; more wait in Ponder, first come first served within a client key, in turn
    across keys (default: twice what the engines say they run at once, SGLang's
    max_running_requests or vLLM's max_num_seqs where published, else 4096 per replica)."""
    helper_model: Annotated[str | None, Flag(metavar="NAME")] = None
    """The served model that runs helper steps by default, e.g. an instruct model beside
    a thinking one (a spec's summarizer=, critic=, abstractor=, judge_model= win)."""
    answer_format: Annotated[AnswerFormat | None, Flag(metavar="FORMAT")] = None
    """How a sample's final answer is read when a request does not say: boxed (only the
    last \\boxed{} after the thinking: a sample without one casts no vote), lenient (also
    "final answer is X", "#### X", the last number), or a reference's reader
    (boxed_anywhere, answer_is, after_answer_marker). Default: boxed; lenient with the
    compact prompt set, whose templates ask for no box."""

    effort: Literal["policy", "passthrough"] = "policy"
    """What a request's reasoning effort (chat's reasoning_effort, Responses'
    reasoning.effort, Messages' thinking.budget_tokens) does: policy selects the spec and
    budget --effort-policy names (with no policy: passthrough); passthrough sends the
    field to the engine unchanged (a thinking model whose engine reads it)."""
    effort_policy: Annotated[EffortPolicyField, Flag(metavar="FILE|JSON")] = None
    """Per effort level (minimal, low, medium, high, auto) the spec and the budget of
    generated tokens a request's reasoning effort runs: a YAML/JSON/TOML file (what the
    calibration command writes) or the policy inline; unset: efforts pass through."""

    def thinking_config(self) -> Thinking:
        """How this model thinks, for a run (:class:`scaffolds.core.thinking.Thinking`)."""
        return Thinking(
            declared=self.thinking,
            off=dict(self.thinking_off),
            markers=ThinkingMarkers(self.thinking_start, self.thinking_end),
        )

    def default_answer_format(self) -> AnswerFormat:
        """``answer_format``, or its default for this model's prompt set.

        >>> compact = ModelOptions(prompts="compact")
        >>> ModelOptions().default_answer_format(), compact.default_answer_format()
        ('boxed', 'lenient')
        """
        if self.answer_format is not None:
            return self.answer_format
        return "lenient" if self.prompts == "compact" else "boxed"

    def model_options(self) -> dict[str, Any]:
        """These fields' values, by name (what a :class:`ModelConfig` is built from)."""
        return {name: getattr(self, name) for name in ModelOptions.model_fields}


class ModelConfig(ModelOptions):
    """One served base model: its engine replicas, prompt set, default scaffold, aliases.

    Aliases are exposed as ``<name>+<alias>`` (e.g. ``qwen3-4b+gsr4``).
    """

    name: str = Field(min_length=1, pattern=r"^[^+\s]+$")

    @model_validator(mode="after")
    def _complete(self) -> ModelConfig:
        if not self.engines:
            raise ValueError(f"engines: model {self.name!r} needs at least one engine URL")
        check_alias_names(self.name, self.aliases)
        if self.verifier and self.reward_url:
            raise ValueError(
                f"model {self.name!r}: set verifier or reward_url, not both (each names "
                "the model's verifier)"
            )
        if self.verifier_max_batch is not None and not (self.verifier or "").startswith("local:"):
            raise ValueError(
                f"model {self.name!r}: verifier_max_batch is for a local:DIR verifier "
                f"(its verifier is {self.verifier or self.reward_url or 'none'})"
            )
        if self.effort == "passthrough" and self.effort_policy is not None:
            raise ValueError(
                f"model {self.name!r}: effort passthrough sends efforts to the engine, so "
                "its effort_policy would never be used (set one or the other)"
            )
        return self

    def effort_mode(self) -> Literal["policy", "passthrough"]:
        """How requests' efforts are served: by the policy, or passed to the engine
        (``effort: passthrough``, or no policy).

        >>> ModelConfig(name="m", engines="http://e/v1").effort_mode()
        'passthrough'
        """
        return "policy" if self.effort_policy is not None else "passthrough"

    def alias_specs(self) -> dict[str, str]:
        """Public alias model ids to their specs."""
        return {
            f"{self.name}+{name.removeprefix(self.name + '+')}": spec
            for name, spec in self.aliases.items()
        }

    @property
    def served_engine_model(self) -> str:
        return self.engine_model or self.name
