"""The one exception hierarchy of Ponder.

Every error a user can see derives from :class:`PonderError`. The server maps these
classes to HTTP statuses in exactly one place (``server/errors.py``); the scaffold
library never mentions HTTP.

>>> try:
...     raise SpecError("steps must be >= 1 (got 0)", param="solver.steps")
... except PonderError as err:
...     (err.param, str(err))
('solver.steps', 'steps must be >= 1 (got 0)')
"""

from __future__ import annotations


class PonderError(Exception):
    """Base of every error Ponder raises on purpose.

    ``param`` names the offending input (a spec field, a request parameter) when one is
    to blame; ``code`` is a short machine-readable tag.
    """

    code: str = "ponder_error"

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.message = message
        self.param = param
        if code is not None:
            self.code = code


class InvalidRequestError(PonderError):
    """The caller asked for something malformed or out of range."""

    code = "invalid_request"


class SpecError(InvalidRequestError):
    """A scaffold spec could not be parsed or validated; ``param`` is the dotted path."""

    code = "invalid_scaffold_spec"


class FanOutError(SpecError):
    """A spec would cause more engine calls (or nesting) than the configured cap allows."""

    code = "fan_out_exceeded"


class PromptFileError(InvalidRequestError):
    """A prompt file (a served model's own wording) is unreadable or does not fit the
    scaffolds it serves: the message names the file, the template and the placeholder.
    Found when ``ponder serve`` starts (it does not), or as a 400 for a request's spec."""

    code = "prompt_file_error"


class UnsupportedError(InvalidRequestError):
    """What was asked is valid but cannot be done here: a strategy needs something the
    engine does not give (deepconf without token logprobs), or a mode not built yet."""

    code = "unsupported"


class ContextLengthError(InvalidRequestError):
    """The request's prompt does not fit the model's context: a run's first engine call
    had no room for a token (a 400 ``context_length_exceeded``, as vLLM and OpenAI
    answer). A later step that outgrows the context is a :class:`ContextFullError`:
    the run ends cut short instead."""

    code = "context_length_exceeded"


class NotFoundError(PonderError):
    """A named thing (model, alias, strategy) does not exist."""

    code = "not_found"


class ScaffoldLoadError(PonderError):
    """A ``ponder.scaffolds`` entry point could not be loaded, or named no strategy: a
    broken install, found when the registry is built (``ponder serve`` does not start)."""

    code = "scaffold_load_error"


class MissingDependencyError(PonderError):
    """An optional dependency is not installed. The message is one line that names what
    needed it and the command that installs it (``install``); the ``ponder`` command
    prints it and exits 2, never a traceback. Raised by
    :func:`scaffolds.dependencies.require`."""

    code = "missing_dependency"

    def __init__(self, message: str, *, module: str, install: str):
        super().__init__(message)
        self.module = module
        self.install = install


class EngineError(PonderError):
    """An engine failed in a way that is not the caller's fault."""

    code = "engine_error"

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        param: str | None = None,
        code: str | None = None,
    ):
        super().__init__(message, param=param, code=code)
        self.status = status


class EngineUnavailableError(EngineError):
    """The engine could not be reached, or kept failing after retries."""

    code = "engine_unavailable"


class EngineTimeoutError(EngineError):
    """The engine did not answer within its timeout."""

    code = "engine_timeout"


class EngineRejectedError(EngineError):
    """The engine refused the request as invalid (a 4xx that retrying cannot fix)."""

    code = "engine_rejected"


class BudgetExhaustedError(PonderError):
    """A run's budget (tokens, engine calls or deadline) is spent.

    Strategies catch this to return their best answer so far, marked as cut short; it
    only escapes a run when there is no answer at all yet.
    """

    code = "budget_exhausted"

    def __init__(self, message: str, *, limit: str):
        super().__init__(message, code="budget_exhausted")
        self.limit = limit


class ContextFullError(BudgetExhaustedError):
    """A step's prompt leaves no room in the model's context (no token fits after it).

    Like a spent budget, it ends the run's growth: strategies return their best answer
    so far, marked cut short (``cut_reason`` "context")."""

    def __init__(self, message: str) -> None:
        super().__init__(message, limit="context")


class DeadlineExceededError(BudgetExhaustedError):
    """The run's deadline passed."""

    code = "deadline_exceeded"

    def __init__(self, message: str = "the run's deadline passed"):
        super().__init__(message, limit="time")
        self.code = "deadline_exceeded"
