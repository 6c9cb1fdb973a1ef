"""How a fake engine answers one generation call: the plan of its samples, the full
body, and the stream (with the configured faults)."""

from __future__ import annotations

import asyncio
import json
import random
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from scaffolds.engines.mock import synthetic_top_logprobs, word_confidence
from testing.fake_engine.config import (
    CACHE_BLOCK,
    HOLD_POLL,
    FakeEngineConfig,
    FakeEngineState,
)
from testing.fake_engine.tokens import common_prefix, prompt_text, split_tokens, token_id


def validate(body: Any, chat: bool) -> str | None:
    if not isinstance(body, dict):
        return "the request body must be a JSON object"
    if chat:
        msgs = body.get("messages")
        if not isinstance(msgs, list) or not msgs or not all(isinstance(m, dict) for m in msgs):
            return "'messages' must be a non-empty list of objects"
        if body.get("continue_final_message"):
            if body.get("add_generation_prompt", True):
                return (
                    "Cannot set both `continue_final_message` and `add_generation_prompt` to True."
                )
            if msgs[-1].get("role") != "assistant":
                return "continue_final_message needs a final assistant message"
    elif isinstance(body.get("prompt"), list):
        prompts = body["prompt"]
        if not prompts or not all(isinstance(p, str) for p in prompts):
            return "'prompt' must be a string or a non-empty list of strings"
        if body.get("stream"):
            return "the fake engine does not stream a list of prompts"
    elif not isinstance(body.get("prompt"), str):
        return "'prompt' must be a string or a non-empty list of strings"
    for name in ("n", "max_tokens", "max_completion_tokens"):
        value = body.get(name)
        if value is not None and (not isinstance(value, int) or value < 1):
            return f"'{name}' must be a positive integer"
    return None


@dataclass
class Sample:
    pieces: list[tuple[str, str]]  # (kind: "reasoning" | "content" | "tool", text)
    finish: str
    tool_call: dict[str, Any] | None = None
    """The sample's one tool call (OpenAI's shape); its arguments are its "tool" pieces."""
    matched_stop: str | None = None
    """The stop string that ended the sample; None when it ended at end of sequence or length."""


@dataclass
class Plan:
    chat: bool
    body: dict[str, Any]
    samples: list[Sample]
    prompt_pieces: list[str]
    cached: int
    step_delays: list[float]
    """Seconds before each decoding step (one step = one token of every sample)."""
    dialect: str = "vllm"
    token_confidence: Callable[[str], float] = word_confidence
    """``FakeEngineConfig.token_confidence`` (for top logprobs)."""
    id: str = field(default_factory=lambda: f"fake-{uuid.uuid4().hex[:12]}")
    created: int = field(default_factory=lambda: int(time.time()))

    @property
    def steps(self) -> int:
        return max((len(s.pieces) for s in self.samples), default=0)

    def logprobs_wanted(self) -> bool:
        lp = self.body.get("logprobs")
        return lp is True if self.chat else lp is not None and lp is not False

    def top_k(self) -> int:
        """How many top logprobs each position carries (chat: ``top_logprobs``;
        completions: ``logprobs``)."""
        k = self.body.get("top_logprobs") if self.chat else self.body.get("logprobs")
        return k if isinstance(k, int) and not isinstance(k, bool) and k > 0 else 0

    def logprobs(self, pieces: list[str]) -> dict[str, Any]:
        """Logprobs in the chat or completions shape (``token_id:N`` tokens if asked),
        with ``top_k()`` synthetic alternatives per position whose negative mean is the
        piece's ``token_confidence``, the sampled token's logprob the first of them (vLLM's
        list holds the sampled token)."""
        as_ids = self.body.get("return_tokens_as_token_ids")
        tokens = [f"token_id:{token_id(p)}" if as_ids else p for p in pieces]
        k = self.top_k()
        tops = [
            synthetic_top_logprobs(self.token_confidence(p.strip()), k) if k else () for p in pieces
        ]
        # The sampled token is the most likely one, as vLLM's list holds it (its first).
        values = [
            top[0] if top else -(token_id(p) % 997) / 997
            for p, top in zip(pieces, tops, strict=True)
        ]
        names = [[f"{t}|alt{j}" for j in range(k)] for t in tokens]
        if not self.chat:
            top_maps = [dict(zip(n, v, strict=True)) for n, v in zip(names, tops, strict=True)]
            top = top_maps if k else None
            return {"tokens": tokens, "token_logprobs": values, "top_logprobs": top}
        return {
            "content": [
                {
                    "token": t,
                    "logprob": v,
                    "top_logprobs": [
                        {"token": name, "logprob": value}
                        for name, value in zip(alts, top, strict=True)
                    ],
                }
                for t, v, alts, top in zip(tokens, values, names, tops, strict=True)
            ]
        }

    def usage(self) -> dict[str, Any]:
        completion = sum(len(s.pieces) for s in self.samples)
        prompt = len(self.prompt_pieces)
        out: dict[str, Any] = {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": self.cached},
        }
        if self.dialect == "sglang":  # details only when something was cached
            out["prompt_tokens_details"] = {"cached_tokens": self.cached} if self.cached else None
            kinds = [k for s in self.samples for k, _ in s.pieces]
            out["reasoning_tokens"] = kinds.count("reasoning")
        return out


def make_plan(
    body: dict[str, Any], chat: bool, config: FakeEngineConfig, state: FakeEngineState
) -> Plan:
    n = int(body.get("n") or 1)
    texts = config.respond(body)
    if len(texts) != n:
        raise ValueError(f"responder returned {len(texts)} texts for n={n}")
    limit = body.get("max_completion_tokens") or body.get("max_tokens")
    stops = body.get("stop") or []
    stops = [stops] if isinstance(stops, str) else list(stops)
    samples = []
    for text in texts:
        finish = "stop"
        cuts = sorted((text.find(s), s) for s in stops if s and s in text)
        matched = cuts[0][1] if cuts else None
        text = text[: cuts[0][0]] if cuts else text
        pieces = [("reasoning", p) for p in split_tokens(config.reasoning or "")] if chat else []
        if pieces and config.dialect == "sglang" and body.get("separate_reasoning") is False:
            inline = f"<think>{config.reasoning}</think>"  # SGLang leaves it in the text
            pieces, text = [], inline + text
        pieces += [("content", p) for p in split_tokens(text)]
        if limit is not None and len(pieces) > limit:
            pieces, finish, matched = pieces[:limit], "length", None
        samples.append(Sample(pieces, finish, matched_stop=matched))
    called = config.tool_call(body) if chat and config.tool_call is not None else None
    if called is not None:
        arguments = str(called.get("arguments", "{}"))
        function = {"name": called.get("name"), "arguments": arguments}
        samples = [
            Sample(
                [("tool", p) for p in split_tokens(arguments)],
                "tool_calls",
                {"id": f"call_{uuid.uuid4().hex[:8]}", "type": "function", "function": function},
            )
            for _ in texts
        ]
    prompt_pieces = split_tokens(prompt_text(body))
    if config.cached_tokens is not None:
        cached = min(config.cached_tokens, len(prompt_pieces))
    else:
        common = [common_prefix(s, prompt_pieces) for s in state._seen_prompts]
        cached = max(common, default=0) // CACHE_BLOCK * CACHE_BLOCK
        state._seen_prompts = [*state._seen_prompts[-255:], prompt_pieces]
    steps = max((len(s.pieces) for s in samples), default=0)
    step, alpha = config.latency_per_token, config.tail_alpha
    if alpha and step and config.tail_per_token:
        delays = [step * random.paretovariate(alpha) for _ in range(steps)]
    else:
        delays = [step * random.paretovariate(alpha) if alpha and step else step] * steps
    return Plan(
        chat, body, samples, prompt_pieces, cached, delays, config.dialect, config.token_confidence
    )


EOS_TOKEN_ID = 2
"""What SGLang's ``matched_stop`` says for a sample that ended at end of sequence."""


def stop_fields(sample: Sample, dialect: str) -> dict[str, Any]:
    """How the engine says what stopped a sample: vLLM's ``stop_reason`` (the stop string,
    else null), SGLang's ``matched_stop`` (the stop string, the EOS token id, else null).

    >>> stop_fields(Sample([], "stop", matched_stop="\\n\\n"), "vllm")
    {'stop_reason': '\\n\\n'}
    >>> stop_fields(Sample([], "stop"), "sglang"), stop_fields(Sample([], "length"), "sglang")
    ({'matched_stop': 2}, {'matched_stop': None})
    """
    if dialect == "sglang":
        at_eos = sample.finish == "stop" and sample.matched_stop is None
        return {"matched_stop": EOS_TOKEN_ID if at_eos else sample.matched_stop}
    return {"stop_reason": sample.matched_stop}


def full_body(plan: Plan, config: FakeEngineConfig) -> dict[str, Any]:
    choices = []
    for i, sample in enumerate(plan.samples):
        content = "".join(t for k, t in sample.pieces if k == "content")
        reasoning = "".join(t for k, t in sample.pieces if k == "reasoning")
        pieces = [t for _, t in sample.pieces]
        wanted = plan.logprobs_wanted() and config.logprobs
        logprobs = plan.logprobs(pieces) if wanted else None
        choice: dict[str, Any] = {"index": i, "finish_reason": sample.finish, "logprobs": logprobs}
        choice |= stop_fields(sample, plan.dialect)
        if plan.chat:
            message: dict[str, Any] = {"role": "assistant", "content": content}
            if sample.tool_call is not None:
                message |= {"content": None, "tool_calls": [sample.tool_call]}
            if reasoning:
                message[reasoning_field(config)] = reasoning
            choice["message"] = message
        else:
            choice["text"] = content
        if plan.body.get("return_token_ids"):
            choice["token_ids"] = [token_id(p) for p in pieces]
        choices.append(choice)
    obj = "chat.completion" if plan.chat else "text_completion"
    out = {"id": plan.id, "object": obj, "created": plan.created, "model": plan.body.get("model")}
    out |= {"choices": choices, "usage": plan.usage()}
    if plan.body.get("return_token_ids"):
        out["prompt_token_ids"] = [token_id(p) for p in plan.prompt_pieces]
    return out


def each_prompt(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The body once per prompt of a list (``prompt: [...]``), else just the body."""
    prompts = body.get("prompt")
    if not isinstance(prompts, list):
        return [body]
    return [{**body, "prompt": prompt} for prompt in prompts]


def list_body(plans: list[Plan], config: FakeEngineConfig) -> dict[str, Any]:
    """One answer to a list of prompts, as vLLM gives it: prompt ``p``'s samples at
    ``p * n + i``, each choice with its prompt's token ids (when asked), the usage summed."""
    if len(plans) == 1 and not isinstance(plans[0].body.get("prompt"), list):
        return full_body(plans[0], config)
    out = full_body(plans[0], config)
    out.pop("prompt_token_ids", None)
    choices = []
    for p, plan in enumerate(plans):
        one = full_body(plan, config)
        for choice in one["choices"]:
            choice["index"] += p * len(plan.samples)
            if "prompt_token_ids" in one:
                choice["prompt_token_ids"] = one["prompt_token_ids"]
            choices.append(choice)
    out["choices"] = choices
    out["usage"] = summed_usage(plans)
    return out


def summed_usage(plans: list[Plan]) -> dict[str, Any]:
    """The usage of one request over ``plans`` (one per prompt)."""
    usages = [plan.usage() for plan in plans]
    if len(usages) == 1:
        return usages[0]
    out = dict(usages[0])
    for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
        out[key] = sum(u[key] for u in usages)
    out["prompt_tokens_details"] = {"cached_tokens": sum(plan.cached for plan in plans)}
    return out


def sse(data: dict[str, Any] | str) -> str:
    return f"data: {data if isinstance(data, str) else json.dumps(data)}\n\n"


def reasoning_field(config: FakeEngineConfig) -> str:
    return "reasoning_content" if config.dialect == "sglang" else config.reasoning_field


def error_body(config: FakeEngineConfig, status: int, message: str) -> dict[str, Any]:
    error = {"message": message, "type": "FakeEngineError", "param": None, "code": status}
    return {"object": "error", **error} if config.dialect == "sglang" else {"error": error}


class _DropConnection(Exception):
    """Raised inside a stream to make the server abort the connection."""


async def stream_body(
    plan: Plan, config: FakeEngineConfig, state: FakeEngineState
) -> AsyncIterator[str]:
    sequences = len(plan.samples)
    state.enter(sequences)
    outcome = "cancelled"
    obj = "chat.completion.chunk" if plan.chat else "text_completion"
    head = {"id": plan.id, "object": obj, "created": plan.created, "model": plan.body.get("model")}

    def chunk(choices: list[dict[str, Any]], **extra: Any) -> str:
        return sse({**head, "choices": choices, **extra})

    try:
        await while_held(config, state)  # a disconnect cancels this generator
        if plan.chat:
            yield chunk(
                [
                    {"index": i, "delta": {"role": "assistant", "content": ""}}
                    for i in range(len(plan.samples))
                ]
            )
        if config.malformed:
            yield "data: {this is not json\n\n"
        if config.stream_error is not None:
            failure = config.stream_error
            outcome = "failed"
            yield sse(error_body(config, failure.status, failure.message))
            yield sse("[DONE]")
            return
        sent = 0
        for step in range(plan.steps):
            if plan.step_delays[step]:
                await asyncio.sleep(plan.step_delays[step])
            for i, sample in enumerate(plan.samples):
                if step >= len(sample.pieces):
                    continue
                kind, piece = sample.pieces[step]
                choice: dict[str, Any] = {"index": i, "finish_reason": None}
                if kind == "tool":  # the whole call at its first piece, as one delta
                    if step == 0 and sample.tool_call is not None:
                        choice["delta"] = {"tool_calls": [{"index": 0, **sample.tool_call}]}
                        yield chunk([choice])
                    continue
                if plan.chat:
                    key = reasoning_field(config) if kind == "reasoning" else "content"
                    choice["delta"] = {key: piece}
                else:
                    choice["text"] = piece
                if plan.logprobs_wanted() and config.logprobs:
                    choice["logprobs"] = plan.logprobs([piece])
                yield chunk([choice])
                sent += 1
                if config.drop_after_chunks is not None and sent >= config.drop_after_chunks:
                    outcome = "dropped"
                    raise _DropConnection("fake engine: dropping the connection mid-stream")
                cut = config.truncate_after_chunks
                if cut is not None and sent >= cut:
                    outcome = "dropped"
                    return
        empty: dict[str, Any] = {"delta": {}} if plan.chat else {"text": ""}
        yield chunk(
            [
                {"index": i, **empty, "finish_reason": s.finish, **stop_fields(s, plan.dialect)}
                for i, s in enumerate(plan.samples)
            ]
        )
        if (plan.body.get("stream_options") or {}).get("include_usage"):
            state.reported_usage.append(plan.usage())
            yield chunk([], usage=plan.usage())
        yield sse("[DONE]")
        outcome = "completed"
    finally:
        state.leave(sequences)
        setattr(state, outcome, getattr(state, outcome) + 1)


async def while_held(config: FakeEngineConfig, state: FakeEngineState) -> None:
    """Return once ``config.hold`` is off (or the server stops)."""
    while True:
        if not config.hold or state.stopping:
            return
        await asyncio.sleep(HOLD_POLL)
