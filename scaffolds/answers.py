"""Final-answer extraction, equivalence and voting.

>>> extract_answer("so the total is \\\\boxed{\\\\frac{1}{2}}.")
'\\\\frac{1}{2}'
"""

from __future__ import annotations

import re

_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")


def extract_boxed(text: str) -> str | None:
    """The content of the last ``\\boxed{...}`` (nested braces allowed), or None."""
    last: str | None = None
    for match in _BOXED.finditer(text):
        depth, start = 1, match.end()
        for i in range(start, len(text)):
            if text[i] == "{":
                depth += 1
            elif text[i] == "}":
                depth -= 1
                if depth == 0:
                    last = text[start:i].strip()
                    break
    return last


_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def extract_answer(text: str) -> str | None:
    """The final answer of a solution: the last ``\\boxed{}``, else the last number."""
    boxed = extract_boxed(text)
    if boxed is not None:
        return boxed
    numbers = _NUMBER.findall(text)
    return numbers[-1].replace(",", "") if numbers else None
