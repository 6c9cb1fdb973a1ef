"""math-verify, guarded: its parser can hang or raise on pathological LaTeX.

:class:`MathVerifier` is what :mod:`scaffolds.evaluation.answers` compares normalized
answers with when they are not equal as strings.
"""

from __future__ import annotations

import logging
import math
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

logger = logging.getLogger(__name__)


class MathVerifier:
    r"""math-verify with a per-call parse cache and thread-appropriate timeouts.

    >>> MathVerifier(5.0).equivalent(r"\frac{1}{2}", "0.5")
    True
    """

    def __init__(self, timeout_s: float | None) -> None:
        on_main = threading.current_thread() is threading.main_thread()
        limited = on_main and timeout_s is not None and timeout_s > 0
        # math-verify times out with signal.alarm: whole seconds, main thread only.
        self.timeout = max(1, math.ceil(timeout_s)) if limited and timeout_s else None
        self.parsed: dict[str, list[Any]] = {}

    def parse(self, answer: str) -> list[Any]:
        if answer not in self.parsed:
            from math_verify import parse

            wrapped = "\\boxed{" + answer + "}"
            found = self.guarded(lambda: parse(wrapped, parsing_timeout=self.timeout), [])
            self.parsed[answer] = list(found)
        return self.parsed[answer]

    def verify(self, gold: str, pred: str) -> bool:
        """Whether ``pred`` matches ``gold`` (both normalized), in that direction."""
        from math_verify import verify

        parsed_gold, parsed_pred = self.parse(gold), self.parse(pred)
        if not parsed_gold or not parsed_pred:
            return False
        return bool(
            self.guarded(
                lambda: verify(parsed_gold, parsed_pred, timeout_seconds=self.timeout), False
            )
        )

    def equivalent(self, a: str, b: str) -> bool:
        return self.verify(a, b) or self.verify(b, a)

    def guarded(self, call: Callable[[], Any], default: Any) -> Any:
        """``call()``, or ``default`` if math-verify raised (its timeout is a BaseException).

        math-verify's ``signal.alarm(0)`` would cancel a timer someone else set (such as
        pytest-timeout's), so one that was running is re-armed with the time it had left.
        """
        from math_verify.errors import TimeoutException

        outer = signal.getitimer(signal.ITIMER_REAL)[0] if self.timeout else 0.0
        started = time.monotonic()
        try:
            return call()
        except (Exception, TimeoutException):
            logger.debug("math-verify failed", exc_info=True)
            return default
        finally:
            if outer > 0:
                left = outer - (time.monotonic() - started)
                signal.setitimer(signal.ITIMER_REAL, max(left, 0.001))


__all__ = ["MathVerifier"]
