"""Tool calls as votes: a sample that calls tools votes for its calls, compared by
function name and canonical JSON arguments (keys sorted, no spacing), so
``{"city": "Paris", "unit": "C"}`` and ``{"unit": "C", "city": "Paris"}`` are one vote.
A sample without a call votes as text, grouped with the answers equivalent to its own
(the run's usual vote). The largest group wins; a tie goes to the group whose first
sample came first. :func:`vote_groups` records the vote as a ``tool_vote`` note.

>>> msg = {"message": {"tool_calls": [{"id": "c1", "type": "function", "function":
...        {"name": "get_weather", "arguments": '{"unit": "C", "city": "Paris"}'}}]}}
>>> call_key(msg)
'[["get_weather",{"city":"Paris","unit":"C"}]]'
>>> call_key({"message": {"content": "hi"}}) is None
True
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from scaffolds.core.context import Context
    from scaffolds.core.solution import Solution

__all__ = ["call_key", "vote_groups"]


def call_key(extra: Mapping[str, Any] | None) -> str | None:
    """The canonical form of a generation's tool calls (its engine fields' chat
    ``message.tool_calls``), or None when it calls none."""
    message = (extra or {}).get("message")
    calls = message.get("tool_calls") if isinstance(message, Mapping) else None
    if not calls or not isinstance(calls, Sequence):
        return None
    canonical: list[Any] = []
    for call in calls:
        function = call.get("function") if isinstance(call, Mapping) else None
        if not isinstance(function, Mapping):
            continue
        arguments = function.get("arguments")
        try:
            parsed = json.loads(arguments) if isinstance(arguments, str) else arguments
        except ValueError:
            parsed = arguments  # not JSON: compared as sent
        canonical.append([function.get("name"), parsed])
    if not canonical:
        return None
    return json.dumps(canonical, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


async def vote_groups(samples: Sequence[Solution], ctx: Context) -> list[list[int]]:
    """The samples' indices grouped by vote, largest group first (ties: earliest first).

    Without any tool call this is ``ctx.cluster`` of the answers, unchanged; with one,
    tool-call samples group by :func:`call_key` and the others by their answers, and the
    vote is noted in the trace (``tool_vote``: each group's call or answer, its samples,
    and the winner).
    """
    if not any(s.tool_call for s in samples):
        return await ctx.cluster([s.answer for s in samples])
    texts = [i for i, s in enumerate(samples) if s.tool_call is None]
    groups = [
        [texts[j] for j in cluster]
        for cluster in await ctx.cluster([samples[i].answer for i in texts])
    ]
    by_call: dict[str, list[int]] = {}
    for i, s in enumerate(samples):
        if s.tool_call is not None:
            by_call.setdefault(s.tool_call, []).append(i)
    groups = [g for g in groups if g] + list(by_call.values())
    groups.sort(key=lambda g: (-len(g), min(g)))
    ctx.note(
        "tool_vote",
        {
            "groups": [
                {"call": samples[g[0]].tool_call, "answer": samples[g[0]].answer, "samples": g}
                for g in groups
            ],
            "winner": groups[0][0],
        },
    )
    return groups
