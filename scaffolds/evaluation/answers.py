r"""Final-answer extraction, normalization, equivalence and voting.

Extraction and normalization are cheap string work. Equivalence falls back to
math-verify (imported lazily), whose parser can hang on pathological LaTeX; servers
should go through :class:`scaffolds.evaluation.answer_pool.AnswerChecker`, which runs it in a
process pool under a time limit (and, when that fails, calls these functions with
``verify=False``: normalized strings only).

>>> extract_answer("so the total is \\boxed{\\frac{1}{2}}.")
'\\frac{1}{2}'
>>> majority_vote(["0.5", None, "\\dfrac{1}{2}", "3"])
0
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from scaffolds.evaluation.math_verify_guard import MathVerifier

_BOXED = re.compile(r"\\(?:boxed|fbox)(?![a-zA-Z])\s*")
_FINAL_IS = re.compile(r"final\s+answer\s*(?:is|:)\s*:?\s*([^\s:].*)", re.IGNORECASE)
_ANSWER_COLON = re.compile(r"answer\s*\**\s*[:：]\s*\**\s*([^\s*].*)", re.IGNORECASE)
# GSM8K's "#### 72"; not a Markdown heading ("#### Step 2", "#### #3: ...").
_HASHES = re.compile(r"####[ \t]*([^\s#A-Za-z].*)")
_NUMBER = re.compile(
    r"(?:(?<![\w)])-)?(?<![\d.])(?:\d{1,3}(?:,\d{3})+(?!\d|,\d)(?:\.\d+)?|\d+(?:\.\d+)?(?:/\d+)?)"
)
_THOUSANDS = re.compile(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?")
_DECIMAL = re.compile(r"-?\d+\.\d+")
_THINK_END = "</think>"
_TOKEN = re.compile(r"[^\s$]*")
_BRACE = re.compile(r"[{}]")
_WORD = re.compile(r"(?<![\\a-zA-Z])[a-zA-Z]{2,}")


def extract_boxed(text: str) -> str | None:
    r"""The content of the last non-empty ``\boxed{...}`` or ``\fbox{...}``, or None.

    Nested braces are matched; ``\boxed 5`` (no braces) takes the next token.
    An unclosed ``\boxed{`` (a truncated completion) is skipped.

    >>> extract_boxed(r"\boxed{1} then \boxed{\frac{a}{\sqrt{2}}}")
    '\\frac{a}{\\sqrt{2}}'
    >>> extract_boxed(r"$\boxed 5$"), extract_boxed("no box") is None
    ('5', True)
    """
    found: dict[int, str] = {}  # content by the offset where it starts
    opens: set[int] = set()
    for match in _BOXED.finditer(text):
        at = match.end()
        if text.startswith("{", at):
            opens.add(at)
        elif match.group() != match.group().rstrip():  # "\boxed 5": the next token
            token = _TOKEN.match(text, at)
            found[at] = token.group() if token else ""
    if opens:
        found.update(_brace_groups(text, opens))
    contents = [(at, content.strip()) for at, content in found.items() if content.strip()]
    return max(contents)[1] if contents else None


def _brace_groups(text: str, opens: set[int]) -> dict[int, str]:
    """The inside of each brace group opening at an offset in ``opens``, in one pass.

    Groups never closed (a truncated completion) are left out.
    """
    groups: dict[int, str] = {}
    stack: list[tuple[int, int]] = []  # (depth, offset) of the open groups we want
    depth = 0
    for brace in _BRACE.finditer(text, min(opens)):
        at = brace.start()
        if brace.group() == "{":
            depth += 1
            if at in opens:
                stack.append((depth, at))
        elif depth > 0:
            if stack and stack[-1][0] == depth:
                start = stack.pop()[1]
                groups[start] = text[start + 1 : at]
            depth -= 1
    return groups


def _clean(answer: str) -> str:
    r"""Trim markdown bold, enclosing math delimiters, whitespace and a trailing period."""
    s, previous = answer, None
    while s != previous:
        previous = s
        s = s.strip().strip("*").strip()
        if s.endswith(".") and not s.endswith(".."):
            s = s[:-1]
        if s.startswith(("$", "\\(", "\\[")):
            s = s[1:] if s.startswith("$") else s[2:]
        if s.endswith(("\\)", "\\]")):
            s = s[:-2]
        elif s.endswith("$") and not s.endswith("\\$"):
            s = s[:-1]
    return s


def _anchored(region: str) -> str | None:
    """An explicitly marked answer in ``region``: boxed, then phrases, then ``####``."""
    boxed = _clean(extract_boxed(region) or "")
    if boxed:
        return boxed
    for pattern in (_FINAL_IS, _ANSWER_COLON, _HASHES):
        found = [m.group(1) for m in pattern.finditer(region)]
        if found:
            answer = _clean(re.split(r"\.\s", found[-1])[0])
            if answer:
                return _drop_thousands(answer) if pattern is _HASHES else answer
    return None


def _drop_thousands(s: str) -> str:
    return s.replace(",", "") if _THOUSANDS.fullmatch(s) else s


def _split_think(text: str, end: str = _THINK_END) -> tuple[str, str | None]:
    """(reasoning, final part) around the last ``end`` marker; final is None if absent/empty."""
    if end not in text:
        return text, None
    before, after = text.rsplit(end, 1)
    return before, (after if after.strip() else None)


@functools.lru_cache(maxsize=32)  # a step's answers are read again as its solutions
def extract_answer(text: str, *, end: str = _THINK_END) -> str | None:
    r"""The final answer of a solution, or None.

    Tries the last ``\boxed{}``, then "final answer is X", "answer: X", "#### X",
    then the last number. If a non-empty part follows the end of the thinking (``end``,
    ``</think>`` by default), only that part is searched, except that a boxed answer
    inside the reasoning is a last resort.

    >>> extract_answer("Adding up, 3 + 4 = 7.\n#### 1,007")
    '1007'
    >>> extract_answer("<think>maybe 12? \\boxed{12}</think>So it is 13.")
    '13'
    >>> extract_answer("The final answer is $x^2$. I hope it is correct.")
    'x^2'
    >>> extract_answer("#### 6\nThe answer is indeed 6.\n#### #3: Longer solution\nSo 5 boxes.")
    '6'
    >>> text = "<|begin_of_thought|>\\boxed{12}? No.<|end_of_thought|>So 13."
    >>> extract_answer(text), extract_answer(text, end="<|end_of_thought|>")
    ('12', '13')
    """
    reasoning, final = _split_think(text, end)
    numbers = _NUMBER.findall(text if final is None else final)
    last = numbers[-1].replace(",", "") if numbers else None
    if final is None:
        return _anchored(text) or last
    return _anchored(final) or last or _clean(extract_boxed(reasoning) or "") or None


AnswerFormat = Literal["boxed", "lenient", "boxed_anywhere", "answer_is", "after_answer_marker"]
"""How a sample's final answer is read; a sample with none casts no vote.

- ``boxed``: only the last ``\\boxed{}`` of the part after the thinking
  (:func:`boxed_answer`);
- ``lenient``: :func:`extract_answer` (boxed, "final answer is X", "answer: X",
  "#### X", the last number);
- ``boxed_anywhere``: the last brace-balanced ``\\boxed{}`` anywhere, thinking
  included, as RC, RSA and DeepConf read their outputs (:func:`boxed_anywhere_answer`);
- ``answer_is``: "The answer is X", else the last ``\\boxed{}``, else the last number,
  as ESC reads its few-shot samples (:func:`answer_is_answer`);
- ``after_answer_marker``: after the end of the thinking, the last ``\\boxed{}``, else
  what follows "Answer:", as s1's evaluation reads (:func:`after_answer_marker_answer`).
"""

ANSWER_FORMATS: tuple[AnswerFormat, ...] = (
    "boxed",
    "lenient",
    "boxed_anywhere",
    "answer_is",
    "after_answer_marker",
)


@dataclass(frozen=True, slots=True)
class ThinkingMarkers:
    """Where a model's thinking starts and ends in its text (``<think>``/``</think>`` for
    Qwen3 and R1 distills), for a model that returns its thinking inside the answer.

    >>> ThinkingMarkers.of({"start": "<|begin_of_thought|>", "end": "<|end_of_thought|>"})
    ThinkingMarkers(start='<|begin_of_thought|>', end='<|end_of_thought|>')
    >>> ThinkingMarkers.of({"end": ""}) is None, ThinkingMarkers().as_dict()
    (True, {'start': '<think>', 'end': '</think>'})
    """

    start: str = "<think>"
    end: str = _THINK_END

    @classmethod
    def of(cls, value: Any) -> ThinkingMarkers | None:
        """The markers a JSON object ``{"start": ..., "end": ...}`` names (a model card's,
        a record's); None when it is not one, or a marker is empty."""
        if not isinstance(value, Mapping):
            return None
        start, end = value.get("start"), value.get("end")
        if not (isinstance(start, str) and isinstance(end, str) and start and end):
            return None
        return cls(start, end)

    def as_dict(self) -> dict[str, str]:
        return {"start": self.start, "end": self.end}

    def answer(self, text: str, answer_format: AnswerFormat) -> str | None:
        r"""``text``'s final answer in ``answer_format``, after the thinking these mark.

        >>> ThinkingMarkers("<s>", "</s>").answer(r"<s>\boxed{3}</s>So \boxed{4}.", "boxed")
        '4'
        """
        return final_answer(text, answer_format, start=self.start, end=self.end)


def boxed_answer(text: str, *, start: str = "<think>", end: str = _THINK_END) -> str | None:
    r"""The last ``\boxed{}`` of the final part of ``text`` (after the thinking), or None.

    A text whose thinking opened and never closed has no final part, so no answer;
    a boxed answer inside the thinking does not count.

    >>> boxed_answer(r"<think>\boxed{3}</think>So it is \boxed{4}, not \boxed{5}.")
    '5'
    >>> boxed_answer(r"<think>\boxed{3}</think>So it is 4."), boxed_answer("The answer: 7")
    (None, None)
    >>> boxed_answer(r"<think>almost \boxed{3}") is None
    True
    """
    if end in text:
        final = text.rsplit(end, 1)[1]
    elif start in text:
        return None
    else:
        final = text
    return _clean(extract_boxed(final) or "") or None


def boxed_anywhere_answer(text: str) -> str | None:
    r"""The last brace-balanced ``\boxed{}`` anywhere in ``text``, thinking included, or None.

    Unlike :func:`boxed_answer`, the thinking markers play no part: a box inside the
    thinking counts, and so does one in a thinking that never closed.

    >>> boxed_anywhere_answer(r"<think>\boxed{3}</think>So it is 4.")
    '3'
    >>> boxed_anywhere_answer(r"<think>so \boxed{\frac{\sqrt{3}}{2}}")
    '\\frac{\\sqrt{3}}{2}'
    """
    return _clean(extract_boxed(text) or "") or None


_THE_ANSWER_IS = ("The answer is ", "the answer is ")
_SENTENCE_END = re.compile(r"\.\s")


def answer_is_answer(text: str, *, end: str = _THINK_END) -> str | None:
    r""" "The answer is X" (capitalized first, then lower case; the last of them), else the
    last ``\boxed{}``, else the last number; or None.

    Read in the part after the thinking when there is one (``end``), else in the whole
    text. X is the rest of that line up to a sentence's end; a ``\boxed{}`` in it is taken
    from its box. A text that says "the answer is" and nothing readable after it has no
    answer.

    >>> answer_is_answer("So 3 + 4 = 7. The answer is 7.\n\nQ: next")
    '7'
    >>> answer_is_answer(r"The answer is $\boxed{\frac{1}{2}}$."), answer_is_answer("so 12 or 13")
    ('\\frac{1}{2}', '13')
    """
    _, final = _split_think(text, end)
    region = text if final is None else final
    for phrase in _THE_ANSWER_IS:
        if phrase in region:
            line = region.rsplit(phrase, 1)[1].strip().split("\n", 1)[0]
            boxed = _clean(extract_boxed(line) or "")
            stated = boxed or _clean(_SENTENCE_END.split(line)[0]).rstrip("/")
            return stated or None
    boxed = _clean(extract_boxed(region) or "")
    if boxed:
        return boxed
    numbers = _NUMBER.findall(region)
    return numbers[-1].replace(",", "") if numbers else None


_ANSWER_MARK = re.compile(r"answer\s*:\s*(.*)", re.IGNORECASE | re.DOTALL)


def after_answer_marker_answer(text: str, *, end: str = _THINK_END) -> str | None:
    r"""In the part after the last ``end`` marker (the whole text without one): the last
    ``\boxed{}``, else what follows the first "Answer:" (its last non-empty line); or None.

    >>> after_answer_marker_answer(r"<|im_start|>think\nmaybe 2<|im_start|>answer\nAnswer: 3",
    ...                            end="<|im_start|>answer")
    '3'
    >>> after_answer_marker_answer("Answer: here it is:\n\n10"), after_answer_marker_answer("so 12")
    ('10', None)
    """
    region = text.rsplit(end, 1)[1] if end in text else text
    boxed = _clean(extract_boxed(region) or "")
    if boxed:
        return boxed
    marked = _ANSWER_MARK.search(region)
    if marked is None:
        return None
    lines = [line for line in marked.group(1).splitlines() if line.strip()]
    return (_clean(lines[-1]) or None) if lines else None


def final_answer(
    text: str,
    answer_format: AnswerFormat = "lenient",
    *,
    start: str = "<think>",
    end: str = _THINK_END,
) -> str | None:
    r"""A sample's final answer as ``answer_format`` reads it (see :data:`AnswerFormat`).

    >>> final_answer("so 12", "lenient"), final_answer("so 12", "boxed")
    ('12', None)
    >>> text = r"<think>\boxed{3}</think>The answer is 4."
    >>> [final_answer(text, f) for f in ("boxed", "boxed_anywhere", "answer_is")]
    [None, '3', '4']
    """
    if answer_format == "boxed":
        return boxed_answer(text, start=start, end=end)
    if answer_format == "boxed_anywhere":
        return boxed_anywhere_answer(text)
    if answer_format == "answer_is":
        return answer_is_answer(text, end=end)
    if answer_format == "after_answer_marker":
        return after_answer_marker_answer(text, end=end)
    return extract_answer(text, end=end)


def _answer_of(text: str) -> str | None:
    """``text`` if it looks like a bare answer, else the answer extracted from it."""
    _, final = _split_think(text)
    region = text if final is None else final
    anchored = _anchored(region)
    if anchored:
        return anchored
    bare = _clean(region)
    words = len(_WORD.findall(bare))
    short = bool(bare) and "\n" not in bare and len(bare) <= 80
    if short and words < 2:  # not prose: take it as it is
        return bare
    return extract_answer(text) or (bare if short and words <= 4 else None)


_SPACING = re.compile(r"\\(?:left|right)(?![a-zA-Z])|\\[!,;:]")
_TEXT_ONLY = re.compile(r"\\(?:text|textbf|mathrm|mbox)\{([^{}]*)\}")
_UNIT_TAIL = re.compile(
    r"(?P<value>[^\\{}]*\d|\\frac\{[^{}]+\}\{[^{}]+\})\s*"
    r"\\(?:text|mbox|mathrm)\{\s*[a-zA-Z][a-zA-Z. ]*\}(?:\^\{?\d\}?)?"
)


def normalize_answer(ans: str) -> str:
    r"""A cheap canonical string form of an answer, for exact comparison.

    >>> normalize_answer(r"$\dfrac{1}{2}$"), normalize_answer(r"\left( 1, 2 \right)")
    ('\\frac{1}{2}', '(1,2)')
    >>> normalize_answer("2,000.50"), normalize_answer(r"12 \text{ cm}^2")
    ('2000.5', '12')
    """
    s = _clean(ans)
    s = _SPACING.sub("", s).replace("\\ ", " ")
    s = re.sub(r"\\[dt]frac(?![a-zA-Z])", r"\\frac", s).replace("{,}", ",")
    unit = _UNIT_TAIL.fullmatch(s.strip())
    if unit:
        s = unit.group("value")
    whole = _TEXT_ONLY.fullmatch(s.strip())
    if whole:
        s = whole.group(1)
    s = re.sub(r"\s+", _space_or_nothing, s.strip())
    s = _clean(s)
    s = _drop_thousands(s)
    if _DECIMAL.fullmatch(s):
        s = s.rstrip("0").rstrip(".")
    return "0" if s == "-0" else s


def _space_or_nothing(match: re.Match[str]) -> str:
    """Keep one space where it ends a LaTeX command name before a letter (``\\pi r``)."""
    before, after = match.string[: match.start()], match.string[match.end() :]
    needed = re.search(r"\\[a-zA-Z]+$", before) and after[:1].isalpha()
    return " " if needed else ""


def _same(a: str | None, b: str | None, check: Callable[[str, str], bool] | None) -> bool:
    """Equal normalized forms, else ``check`` on them (if given); empty never matches."""
    na, nb = normalize_answer(a or ""), normalize_answer(b or "")
    return bool(na and nb) and (na == nb or (check is not None and check(na, nb)))


def answers_equal(a: str, b: str, *, timeout_s: float = 5.0, verify: bool = True) -> bool:
    r"""Whether two answers are the same: equal normalized, or (with ``verify``)
    math-verify equivalent.

    Safe from any thread: off the main thread math-verify runs without its signal
    based timeout (run it in :class:`~scaffolds.evaluation.answer_pool.AnswerChecker` for a hard
    limit).

    >>> answers_equal(r"\frac{1}{2}", "0.5"), answers_equal("2,000", "2000")
    (True, True)
    >>> answers_equal("(1, 2)", "[1, 2)")
    False
    """
    return _same(a, b, MathVerifier(timeout_s).equivalent if verify else None)


def is_correct(
    gold: str, prediction_text_or_answer: str, *, timeout_s: float = 5.0, verify: bool = True
) -> bool:
    r"""Grade a prediction (a bare answer or a whole solution) against the gold answer
    (``verify=False``: by normalized strings only).

    >>> is_correct("72", "She earns 9 * 8 = 72 dollars.\n#### 72")
    True
    >>> is_correct(r"\frac{3}{4}", "So the answer is \\boxed{0.75}."), is_correct("1/2", "2")
    (True, False)
    """
    gold_answer, pred_answer = _answer_of(gold), _answer_of(prediction_text_or_answer)
    return _same(gold_answer, pred_answer, MathVerifier(timeout_s).verify if verify else None)


def _cluster(
    answers: Sequence[str | None], same: Callable[[str, str], bool] | None
) -> list[list[int]]:
    clusters: list[list[int]] = []
    representatives: list[str] = []
    by_key: dict[str, int] = {}
    for index, answer in enumerate(answers):
        key = normalize_answer(answer) if answer is not None else ""
        if not key:
            continue
        slot = by_key.get(key)
        if slot is None and same is not None:
            slot = next((j for j, rep in enumerate(representatives) if same(rep, key)), None)
        if slot is None:
            slot = len(clusters)
            clusters.append([])
            representatives.append(key)
        by_key[key] = slot
        clusters[slot].append(index)
    return sorted(clusters, key=lambda members: (-len(members), members[0]))


def cluster_answers(
    answers: Sequence[str | None], *, timeout_s: float = 5.0, verify: bool = True
) -> list[list[int]]:
    r"""Indices of equivalent answers grouped, largest group first, ties by first index.

    None and empty answers join no group. Each answer is compared with the first member
    of each existing group (``verify=False``: by normalized strings only).

    >>> cluster_answers(["1/2", "7", None, "0.5", "7.0", r"\frac12"])
    [[0, 3, 5], [1, 4]]
    """
    return _cluster(answers, MathVerifier(timeout_s).equivalent if verify else None)


def majority_vote(answers: Sequence[str | None], *, timeout_s: float = 5.0) -> int | None:
    """Index of the first member of the largest group of equivalent answers, or None.

    >>> majority_vote(["3", "4", "4.0", "3"]), majority_vote([None, None])
    (0, None)
    """
    clusters = cluster_answers(answers, timeout_s=timeout_s)
    return clusters[0][0] if clusters else None
