"""The request a run answers: the OpenAI chat completion and completion models every API's
request becomes (Responses and Messages requests are turned into a chat completion).

Request models accept fields they do not know (``extra="allow"``), as OpenAI clients
send new ones all the time; the serving layer logs their names and passes them on to the
engine (:meth:`passthrough`). Ponder's own fields (:class:`PonderFields`: ``scaffold``, a
spec string or JSON object, ``budget``, ``answer_format``, ``return_trace``,
``stream_trace`` and ``reference``) are declared once, for every API.

>>> req = ChatCompletionRequest.model_validate(
...     {"model": "m", "messages": [{"role": "user", "content": "2+2?"}], "metadata": {},
...      "logprobs": True, "budget": {"max_calls": 2}}
... )
>>> req.unknown_fields(), req.requested_max_tokens(), req.passthrough()
(['logprobs', 'metadata'], None, {'metadata': {}, 'logprobs': True})
"""

from __future__ import annotations

from collections.abc import Container, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError

from scaffolds.errors import InvalidRequestError
from scaffolds.evaluation.answers import AnswerFormat
from server.errors import validation_error

MAX_N = 128
"""The most choices one request may ask for."""

MODELED_FIELDS = frozenset(
    {
        "model",
        "messages",
        "prompt",
        "n",
        "max_tokens",
        "max_completion_tokens",
        "temperature",
        "top_p",
        "stop",
        "seed",
        "stream",
        "stream_options",
    }
)
"""Request fields Ponder reads itself (and sends on to every engine call it makes)."""


class _Open(BaseModel):
    """A request model that keeps unknown fields (and can list them)."""

    model_config = ConfigDict(extra="allow")

    def unknown_fields(self) -> list[str]:
        return sorted(self.model_extra or {})


class StreamOptions(_Open):
    include_usage: bool = False


class BudgetRequest(BaseModel):
    """Ponder's per-request budget; the server caps each limit with its own."""

    model_config = ConfigDict(extra="forbid")

    max_tokens: int | None = Field(default=None, ge=1, description="generated tokens, all calls")
    max_calls: int | None = Field(default=None, ge=1, description="engine calls")
    timeout_s: float | None = Field(default=None, gt=0, description="wall-clock seconds")


class ChatMessage(_Open):
    role: str
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None


class PonderFields(BaseModel):
    """Ponder's own request fields, declared once: every API's request model has them
    (chat and text completions, Responses, Messages), and each reaches the run as the chat
    completion's (:meth:`ponder_fields`). None of them is ever sent to an engine.

    >>> class Request(PonderFields):
    ...     model: str
    >>> Request(model="m", scaffold="gsr(n=2)", reference="4").ponder_fields()["reference"]
    '4'
    """

    scaffold: str | dict[str, Any] | None = Field(
        default=None,
        description='Ponder: the scaffold spec, e.g. "gsr(n=4)" or {"name": "gsr", "n": 4}',
    )
    budget: BudgetRequest | None = Field(default=None, description="Ponder: per-request budget")
    answer_format: AnswerFormat | None = Field(
        default=None,
        description='Ponder: how answers are read for votes: "boxed" (the last \\boxed{} '
        'after the thinking only), "lenient", or a reference\'s reader: "boxed_anywhere" '
        '(the last \\boxed{}, thinking included), "answer_is" ("The answer is", then boxed, '
        'then the last number), "after_answer_marker" (after the thinking: boxed, then '
        '"Answer:"); default: the model\'s answer_format',
    )
    return_trace: bool = Field(default=False, description="Ponder: add the run's trace")
    stream_trace: bool = Field(
        default=False,
        description="Ponder: on a stream, also send every trace event (chat and text "
        'completions: a chunk with no choices and a "ponder": {"event": ...} field; '
        'Responses: a "ponder.trace" event; Messages: a "ponder_trace" event)',
    )
    reference: str | None = Field(
        default=None,
        description="Ponder: the problem's known answer (ponder eval sends it); never shown "
        "to the model; a scaffold's trace may score its intermediate answers against it",
    )

    def ponder_fields(self) -> dict[str, Any]:
        """Ponder's fields as set here, for the chat completion that answers this request."""
        return {name: getattr(self, name) for name in PONDER_FIELDS}


PONDER_FIELDS = tuple(PonderFields.model_fields)
"""The names of Ponder's own request fields (:class:`PonderFields`); never sent to an engine."""


@dataclass(frozen=True)
class EffortAsk:
    """The reasoning effort a request asked for, in its API's own field: a level
    (chat's ``reasoning_effort``, Responses' ``reasoning.effort``) or a thinking budget
    (Messages' ``thinking.budget_tokens``). A model with an effort policy turns it into a
    spec and a budget (:func:`server.runs.planning.plan_run`); any other sends its engine
    :attr:`forward`.

    >>> EffortAsk("reasoning.effort", level="high", forward={"reasoning_effort": "high"}).level
    'high'
    """

    param: str
    """The request field it came from (what an error names)."""
    level: str | None = None
    budget_tokens: int | None = None
    forward: Mapping[str, Any] = field(default_factory=dict)
    """The chat fields a model that passes efforts through sends its engine."""


EFFORT_DESCRIPTION = (
    "OpenAI: how much to reason (minimal, low, medium, high; Ponder also takes auto). On a "
    "model with an effort policy it selects the scaffold and budget the policy names for "
    "the level (the answer's ponder.effort says which ran and why); a scaffold named in "
    "the request (its scaffold field, or a spec or alias in its model) wins over it. "
    "Otherwise it goes to the engine as given."
)


class _OpenAIFields(_Open):
    """The OpenAI fields chat and text completions share."""

    model: str
    n: int = Field(default=1, ge=1, le=MAX_N)
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    stop: str | list[str] | None = None
    seed: int | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    user: str | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    reasoning_effort: str | None = Field(default=None, description=EFFORT_DESCRIPTION)


class _CommonRequest(PonderFields, _OpenAIFields):
    """A chat or text completion request: OpenAI's fields, then Ponder's (in that order in
    the OpenAPI document: pydantic lists a base's fields before its subclass's)."""

    _effort: EffortAsk | None = PrivateAttr(default=None)

    def with_effort(self, ask: EffortAsk | None) -> Self:
        """This request, carrying ``ask`` (what a Responses or Messages request asked in
        its own field); returns itself."""
        self._effort = ask
        return self

    def effort_ask(self) -> EffortAsk | None:
        """The effort this request asked for: what :meth:`with_effort` set, else its
        ``reasoning_effort`` (chat and text completions alike).

        >>> req = CompletionRequest(model="m", prompt="x", reasoning_effort="low")
        >>> req.effort_ask().param, req.effort_ask().forward
        ('reasoning_effort', {'reasoning_effort': 'low'})
        """
        if self._effort is not None:
            return self._effort
        if self.reasoning_effort is None:
            return None
        forward = {"reasoning_effort": self.reasoning_effort}
        return EffortAsk("reasoning_effort", level=self.reasoning_effort, forward=forward)

    def requested_max_tokens(self) -> int | None:
        return self.max_tokens

    def stop_list(self) -> tuple[str, ...]:
        if self.stop is None:
            return ()
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)

    def include_usage(self) -> bool:
        return self.stream_options is not None and self.stream_options.include_usage

    def passthrough(self) -> dict[str, Any]:
        """Every field the caller set beyond :data:`MODELED_FIELDS` and Ponder's own, as
        given (OpenAI's ``logprobs``, ``tools``, ``response_format``..., vLLM's extras)."""
        return self.model_dump(exclude_unset=True, exclude=set(MODELED_FIELDS) | set(PONDER_FIELDS))


class ChatCompletionRequest(_CommonRequest):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)

    def requested_max_tokens(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens


def chat_request(
    api: str,
    request: BaseModel,
    own: Container[str],
    fields: Mapping[str, Any],
    optional: Mapping[str, Any],
) -> ChatCompletionRequest:
    """The chat completion that answers ``api``'s ``request`` (Responses, Messages): its
    unknown fields but those of ``own`` (its API's own, read or only echoed), then
    ``fields``, then those of ``optional`` that are set. One output only (``n`` is 1);
    invalid fields are an :class:`~scaffolds.errors.InvalidRequestError`.

    >>> class Asked(BaseModel, extra="allow"):
    ...     model: str
    >>> asked = Asked(model="m", seed=3, echoed=True)
    >>> messages = [{"role": "user", "content": "x"}]
    >>> chat = chat_request("Test", asked, {"echoed"}, {"model": "m", "messages": messages},
    ...     {"temperature": None})
    >>> chat.seed, chat.temperature, chat.passthrough()
    (3, None, {})
    >>> chat_request("Test", Asked(model="m", n=2), (), {"messages": messages}, {})
    Traceback (most recent call last):
    scaffolds.errors.InvalidRequestError: n: the Test API answers with one output; ...
    """
    chat: dict[str, Any] = {k: v for k, v in (request.model_extra or {}).items() if k not in own}
    chat |= fields
    chat |= {k: v for k, v in optional.items() if v is not None}
    if chat.get("n", 1) != 1:
        raise InvalidRequestError(
            f"n: the {api} API answers with one output; send one request per answer", param="n"
        )
    try:
        return ChatCompletionRequest.model_validate(chat)
    except ValidationError as exc:
        error = validation_error(exc.errors())
        raise InvalidRequestError(error.message, param=error.param) from exc


class CompletionRequest(_CommonRequest):
    prompt: str | list[str]
    """One prompt, or several: each is its own run (choices ``prompt_index * n + i``);
    through ``single``, their calls are one engine request (:mod:`scaffolds.engines.coalesce`)."""


Endpoint = Literal["chat", "completions"]
"""Which OpenAI API a run answers in: chat completions or (text) completions."""
