r"""The scaffold rollout as a verl agent loop, for multi-node RL on Ray.

verl (https://github.com/volcengine/verl) runs each rollout sample through an *agent
loop*: ``AgentLoopBase.run(sampling_params, **row)`` generates through verl's async
server manager (token ids in, token ids and log-probs out) and returns an
``AgentLoopOutput``. :class:`PonderScaffoldAgentLoop` runs the same step as
:class:`training.rollouts.ScaffoldRollout`: it plans the row's scaffold step (the
shared context, from the row or made by the policy through verl's servers), renders
the prompt from the same :class:`~scaffolds.prompts.PromptSet`, samples the step and
returns the sampled ids and log-probs; all samples of a group share one context.

verl pins transformers below TRL's version, so it lives in its own environment: this
module imports verl only when ``PonderScaffoldAgentLoop`` is first looked up. Install
Ponder without the ``train`` extra next to verl there, then point verl at this loop::

    python -c "from training.verl_loop import write_agent_loop_config as w; \
w('ponder_loop.yaml', mode='gsr_refine', prompt_set='default')"
    python -m verl.trainer.main_ppo ... \
        actor_rollout_ref.rollout.mode=async \
        actor_rollout_ref.rollout.agent.agent_loop_config_path=ponder_loop.yaml \
        data.train_files=train.parquet   # rows: agent_name=ponder_scaffold, mode, answer

Rows (verl's dataset fields) need ``raw_prompt`` (chat messages), ``agent_name``
(the name in the YAML) and the gold answer in ``reward_model.ground_truth`` (or
``extra_info.answer``); ``mode`` and stored contexts (``candidates``, ``summary``,
``solution``, ``feedback``, ``abstraction``) may sit at the top level or in
``extra_info``. With ``reward: correctness`` the loop scores the sample itself with
the serving answer module; otherwise verl's reward manager does
(:func:`compute_score` fits its ``custom_reward_function``).

>>> compute_score("math", "so it is \\boxed{12}", "12")
1.0
"""

from __future__ import annotations

import asyncio
import importlib
import json
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from scaffolds.core.context import Context
from scaffolds.core.run_settings import RunSettings
from scaffolds.engines.local_generate import encode_prompt
from scaffolds.engines.protocol import SamplingParams
from scaffolds.evaluation.answer_pool import AnswerChecker
from scaffolds.evaluation.answers import is_correct
from training.rollouts import (
    RolloutSettings,
    StepPlan,
    context_columns,
    plan_step,
    problem_from_prompt,
    rollout_modes,
    sample_step,
)
from training.verl_engine import VerlServerEngine

__all__ = [
    "LoopSettings",
    "PlanCache",
    "agent_loop_class",
    "compute_score",
    "run_scaffold_step",
    "write_agent_loop_config",
]

logger = logging.getLogger(__name__)

AGENT_NAME = "ponder_scaffold"


@dataclass(frozen=True)
class LoopSettings:
    """The agent loop's settings (the keys of its entry in verl's agent-loop YAML)."""

    mode: str = "direct"
    """Mode of rows that name none."""
    prompt_set: str = "default"
    num_candidates: int = 4
    context_max_tokens: int | None = None
    summary_max_tokens: int | None = None
    reward: str = "correctness"
    """``correctness``: score here with the answer module; ``none``: leave it to verl."""

    def rollout(self) -> RolloutSettings:
        return RolloutSettings(
            prompt_set=self.prompt_set,
            num_candidates=self.num_candidates,
            context_max_tokens=self.context_max_tokens,
            summary_max_tokens=self.summary_max_tokens,
            default_mode=self.mode,
        )


class PlanCache:
    """One plan per group: the first sample of a group key plans, the next ``uses - 1``
    reuse it, then it is forgotten (at most ``max_entries`` are kept)."""

    def __init__(self, uses: int, *, max_entries: int = 4096) -> None:
        self.uses = max(1, uses)
        self.max_entries = max_entries
        self._entries: OrderedDict[str, tuple[asyncio.Future[StepPlan], list[int]]] = OrderedDict()

    async def get(self, key: str, make: Callable[[], Awaitable[StepPlan]]) -> StepPlan:
        entry = self._entries.get(key)
        if entry is None:
            future: asyncio.Future[StepPlan] = asyncio.ensure_future(make())
            entry = (future, [0])
            self._entries[key] = entry
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)
        future, used = entry
        used[0] += 1
        if used[0] >= self.uses:
            self._entries.pop(key, None)
        try:
            return await asyncio.shield(future)
        except BaseException:
            self._entries.pop(key, None)
            raise

    def __len__(self) -> int:
        return len(self._entries)


def _field(row: Mapping[str, Any], key: str) -> Any:
    if row.get(key) is not None:
        return row[key]
    extra = row.get("extra_info")
    return extra.get(key) if isinstance(extra, Mapping) else None


def _answer(row: Mapping[str, Any]) -> str | None:
    reward_model = row.get("reward_model")
    if isinstance(reward_model, Mapping) and reward_model.get("ground_truth") is not None:
        return str(reward_model["ground_truth"])
    found = _field(row, "answer")
    return None if found is None else str(found)


def _group_key(row: Mapping[str, Any]) -> str | None:
    if row.get("uid") is not None:
        return str(row["uid"])
    index = _field(row, "index")
    if index is None:
        return None
    return f"{index}:{json.dumps(row.get('raw_prompt'), sort_keys=True, default=str)}"


async def run_scaffold_step(
    server_manager: Any,
    tokenizer: Any,
    sampling_params: Mapping[str, Any],
    row: Mapping[str, Any],
    *,
    settings: LoopSettings | None = None,
    response_length: int | None = None,
    prompt_length: int | None = None,
    chat_template_kwargs: Mapping[str, Any] | None = None,
    plans: PlanCache | None = None,
    checker: AnswerChecker | None = None,
) -> dict[str, Any]:
    """One verl rollout sample of the row's scaffold step: the fields of an
    ``AgentLoopOutput`` (prompt/response ids, mask, log-probs, reward, extras).

    ``prompt_length`` and ``chat_template_kwargs`` are verl's ``rollout.prompt_length``
    and ``data.apply_chat_template_kwargs``."""
    settings = settings or LoopSettings()
    messages = list(row["raw_prompt"])
    mode = str(_field(row, "mode") or settings.mode)
    if mode not in (modes := rollout_modes()):
        raise ValueError(f"unknown rollout mode {mode!r} (known: {', '.join(modes)})")
    stored = {key: _field(row, key) for key in context_columns()}
    engine = VerlServerEngine(
        server_manager,
        tokenizer,
        sampling_params,
        chat_template_kwargs=chat_template_kwargs,
        max_prompt_tokens=prompt_length,
    )
    problem = problem_from_prompt(messages)
    params = SamplingParams(logprobs=True)
    run_settings = RunSettings(prompts=settings.prompt_set, params=params, chat=True)

    def context() -> Context:
        return Context.root(engine, run_settings)

    async def make() -> StepPlan:
        return await plan_step(mode, stored, context(), problem, settings.rollout())

    key = _group_key(row)
    plan = await plans.get(f"{mode}:{key}", make) if plans is not None and key else await make()
    [completion], prompt_ids = await sample_step(context(), plan, n=1, max_tokens=response_length)
    ids = list(completion.token_ids or ())[: response_length or None]
    logprobs = list(completion.logprobs or ())[: len(ids)] or None
    reward: float | None = None
    answer = _answer(row)
    if settings.reward == "correctness" and answer is not None:
        text = tokenizer.decode(ids, skip_special_tokens=True)
        if checker is not None:
            reward = 1.0 if await checker.grade(answer, text) else 0.0
        else:
            reward = 1.0 if is_correct(answer, text) else 0.0
    return {
        "prompt_ids": list(prompt_ids or engine_prompt_ids(tokenizer, plan)),
        "response_ids": ids,
        "response_mask": [1] * len(ids),
        "response_logprobs": logprobs if logprobs and len(logprobs) == len(ids) else None,
        "reward_score": reward,
        "num_turns": 2,
        "metrics": {},
        "extra_fields": {"ponder_mode": mode, "ponder_step_kind": plan.kind},
    }


def engine_prompt_ids(tokenizer: Any, plan: StepPlan) -> list[int]:
    return encode_prompt(tokenizer, plan.prompt)


def compute_score(
    data_source: Any, solution_str: str, ground_truth: Any, extra_info: Any = None
) -> float:
    """verl ``custom_reward_function``: 1.0 if ``solution_str`` answers ``ground_truth``."""
    return 1.0 if is_correct(str(ground_truth), solution_str) else 0.0


def write_agent_loop_config(path: str | Path, *, name: str = AGENT_NAME, **settings: Any) -> Path:
    """Write verl's agent-loop YAML registering :class:`PonderScaffoldAgentLoop` as ``name``
    (``settings`` are :class:`LoopSettings` fields)."""
    chosen = asdict(LoopSettings(**settings))
    lines = [f"- name: {name}", "  _target_: training.verl_loop.PonderScaffoldAgentLoop"]
    lines += [f"  {key}: {json.dumps(value)}" for key, value in chosen.items()]
    target = Path(path)
    target.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return target


_LOOP_CLASS: type | None = None


def agent_loop_class() -> type:
    """Build (once) and register the verl agent-loop class; needs verl installed."""
    global _LOOP_CLASS
    if _LOOP_CLASS is not None:
        return _LOOP_CLASS
    try:
        module: Any = importlib.import_module("verl.experimental.agent_loop.agent_loop")
    except ImportError as exc:
        raise ImportError(
            "PonderScaffoldAgentLoop needs verl (pip install verl in its own environment; "
            "see training/README.md)"
        ) from exc

    fields = set(LoopSettings.__dataclass_fields__)
    agent_loop_output = module.AgentLoopOutput

    class PonderScaffoldAgentLoop(module.AgentLoopBase):  # type: ignore[misc]
        """verl agent loop running one Ponder scaffold step per sample."""

        _plans: PlanCache | None = None
        _checker: AnswerChecker | None = None

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            chosen = {k: kwargs.pop(k) for k in list(kwargs) if k in fields}
            super().__init__(*args, **kwargs)
            self.settings = LoopSettings(**chosen)
            rollout = self.config.actor_rollout_ref.rollout
            self.response_length = int(rollout.response_length)
            self.prompt_length = int(rollout.prompt_length)
            cls = type(self)
            if cls._plans is None:
                cls._plans = PlanCache(int(getattr(rollout, "n", 1) or 1))
            if cls._checker is None and self.settings.reward == "correctness":
                cls._checker = AnswerChecker(max_workers=1)

        async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> Any:
            fields_out = await run_scaffold_step(
                self.server_manager,
                self.tokenizer,
                sampling_params,
                kwargs,
                settings=self.settings,
                response_length=self.response_length,
                prompt_length=self.prompt_length,
                chat_template_kwargs=dict(getattr(self, "apply_chat_template_kwargs", None) or {}),
                plans=type(self)._plans,
                checker=type(self)._checker,
            )
            return agent_loop_output(**fields_out)

    PonderScaffoldAgentLoop.__module__ = __name__
    PonderScaffoldAgentLoop.__qualname__ = "PonderScaffoldAgentLoop"
    module.register(AGENT_NAME)(PonderScaffoldAgentLoop)
    _LOOP_CLASS = PonderScaffoldAgentLoop
    return _LOOP_CLASS


def __getattr__(name: str) -> Any:
    if name == "PonderScaffoldAgentLoop":
        return agent_loop_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
