r"""The reference implementations' answer readers as ``answer_format`` values (issue 51,
finding 3), each checked on texts whose answers are worked out by hand from the reference's
extractor, cited by repository, commit, file and line.

- RC (IanYHWu/rc @ 8449427b), RSA (HyperPotatoNeo/RSA @ 537ec606) and DeepConf
  (facebookresearch/deepconf @ 675529d1) read the last ``\boxed{}`` of the whole output,
  thinking included: ``boxed_anywhere``.
- ESC (Yiwei98/ESC @ 799157a4) reads "The answer is" first, then the last ``boxed``, then
  the last number: ``answer_is``. Adaptive-Consistency (Pranjal2041/AdaptiveConsistency
  @ 899ab565) reads "answer is" in the last line only, with no fallback.
- s1 (simplescaling/s1 @ 77272c6e) reads after its answer marker: the last ``\boxed{}``,
  else what follows "Answer:": ``after_answer_marker``.
"""

from __future__ import annotations

import re
from typing import get_args

import pytest

from scaffolds.evaluation.answers import (
    ANSWER_FORMATS,
    AnswerFormat,
    ThinkingMarkers,
    after_answer_marker_answer,
    answer_is_answer,
    boxed_anywhere_answer,
    final_answer,
)
from scaffolds.evaluation.grading import ExactGrader


def test_every_format_is_listed_once_and_the_old_ones_stay() -> None:
    assert get_args(AnswerFormat) == ANSWER_FORMATS
    assert ANSWER_FORMATS[:2] == ("boxed", "lenient")


# -- boxed_anywhere: RC, RSA, DeepConf ------------------------------------------------------
def test_boxed_anywhere_reads_the_thinking_as_rc_rsa_and_deepconf_do() -> None:
    """Each reference reads the whole generated text, thinking included:

    - RC: ``inference/evaluation.ipynb`` (source line 76 of the JSON) calls
      ``extract_boxed_expressions(output)`` on each reasoning output; the extractor is
      ``inference/utils/evaluators.py:13-25`` (the last match of its regex).
    - RSA: ``eval_loop.py:345-350`` applies ``last_boxed_only_string``
      (``rewards/math.py:77-101``: from the last ``\\boxed``, to its balanced close) to
      each whole response.
    - DeepConf: ``deepconf/utils.py:282-292`` calls ``extract_answer(output.text)``
      (``deepconf/utils.py:13-37``: after the last "boxed", to the balanced close).

    So a box in the thinking counts, even when a later part has no box, and a thinking
    that never closed is read too; ``boxed`` (after the thinking only) reads neither.
    """
    closed = r"<think>so \boxed{3}</think>It is three."
    assert boxed_anywhere_answer(closed) == "3"
    assert final_answer(closed, "boxed") is None
    open_ended = r"<think>first \boxed{2}, no: \boxed{\frac{1}{2}}"  # cut mid-thought
    assert boxed_anywhere_answer(open_ended) == r"\frac{1}{2}"
    assert final_answer(open_ended, "boxed") is None
    # The last box wins wherever it is: after the thinking, it is the final part's.
    assert boxed_anywhere_answer(r"<think>\boxed{3}</think>So \boxed{4}.") == "4"
    assert boxed_anywhere_answer("no box here") is None


def test_boxed_anywhere_ignores_the_thinking_markers() -> None:
    markers = ThinkingMarkers("<|begin_of_thought|>", "<|end_of_thought|>")
    text = r"<|begin_of_thought|>\boxed{7}<|end_of_thought|>done"
    assert markers.answer(text, "boxed_anywhere") == "7"
    assert markers.answer(text, "boxed") is None


# RC's extractor, inference/utils/evaluators.py:23 (IanYHWu/rc @ 8449427b): a regex that
# matches braces one level deep inside the box, no deeper.
RC_ONE_LEVEL = r"\\boxed\{((?:[^{}]|(?:\{[^{}]*\}))*)\}"


def test_rc_regex_loses_two_level_braces_and_boxed_anywhere_keeps_them() -> None:
    """RC's own regex (``inference/utils/evaluators.py:23-25``) finds a box's content only
    when its braces nest one level: ``\\boxed{\\frac{1}{2}}`` reads, but in
    ``\\boxed{\\frac{\\sqrt{3}}{2}}`` the group ``{\\sqrt{3}}`` is two levels deep, the regex
    has no match, and RC grades the sample as having no answer. ``boxed_anywhere`` matches
    braces to any depth (as RSA's ``rewards/math.py:86-97`` and DeepConf's
    ``deepconf/utils.py:19-32`` do), so an RC recipe reading with it scores such a sample
    by its answer: a recipe that wants RC's exact number must say it uses this reader and
    not RC's regex, and that the two differ only on boxes nested two levels or more.
    """
    one_level = r"so \boxed{\frac{1}{2}}"
    assert re.findall(RC_ONE_LEVEL, one_level)[-1] == r"\frac{1}{2}"
    assert boxed_anywhere_answer(one_level) == r"\frac{1}{2}"
    two_level = r"so \boxed{\frac{\sqrt{3}}{2}}"
    assert re.findall(RC_ONE_LEVEL, two_level) == []  # RC: no answer
    assert boxed_anywhere_answer(two_level) == r"\frac{\sqrt{3}}{2}"
    # With an earlier one-level box, RC's regex even falls back to that one.
    both = r"maybe \boxed{\frac{1}{2}}? no: \boxed{\frac{\sqrt{3}}{2}}"
    assert re.findall(RC_ONE_LEVEL, both)[-1] == r"\frac{1}{2}"
    assert boxed_anywhere_answer(both) == r"\frac{\sqrt{3}}{2}"


def test_boxed_anywhere_skips_an_unclosed_box() -> None:
    """A box cut off before its close: RSA's ``last_boxed_only_string`` returns None for
    it (``rewards/math.py:99``), so the sample reads as empty; Ponder skips it and takes
    the box before it, or none."""
    assert boxed_anywhere_answer(r"\boxed{5} then \boxed{\frac{1}{") == "5"
    assert boxed_anywhere_answer(r"then \boxed{\frac{1}{") is None


# -- answer_is: ESC (Adaptive-Consistency for comparison) -----------------------------------
def test_answer_is_reads_the_phrase_then_the_box_then_the_last_number_as_esc_does() -> None:
    """ESC's MATH reader, ``early_stop_math.py:11-49`` (Yiwei98/ESC @ 799157a4): the text
    after the last "The answer is " (line 12-13), else after the last "the answer is "
    (14-15), else the last ``boxed`` (16-34), else the last number (36-43); a trailing
    "." is dropped (44-46) and a box in the stated part is read from its box (50-68).
    Worked by hand:
    """
    # The capitalized phrase wins over a later lower-case one (line 12 before 14).
    assert answer_is_answer("the answer is 3. The answer is 5. Or the answer is 4.") == "5"
    assert answer_is_answer("I think the answer is 12.") == "12"
    # The phrase wins over a box and over later numbers.
    assert answer_is_answer(r"\boxed{7} so The answer is 8. Check: 9 - 1 = 8.") == "8"
    # A box in the stated part is read from its box.
    assert answer_is_answer(r"The answer is $\boxed{\frac{1}{2}}$.") == r"\frac{1}{2}"
    assert answer_is_answer(r"The answer is $\frac{1}{2}$.") == r"\frac{1}{2}"
    # No phrase: the last box; no box: the last number.
    assert answer_is_answer(r"\boxed{3} and later \boxed{4}, 5 left") == "4"
    assert answer_is_answer("3 apples and 4 pears make 7") == "7"
    assert answer_is_answer("no digits at all") is None


def test_a_few_shot_answer_is_read_where_boxed_reads_none() -> None:
    """A few-shot ESC or Adaptive-Consistency sample ends "The answer is X." with no box
    (the prompts' exemplars answer so; AC's ``scripts/pal/core/interface.py:58`` sets the
    prefix "answer is"): ``boxed`` reads none of five such samples, ``answer_is`` reads
    each."""
    samples = [f"Adding up, 2 + {k} = {2 + k}. The answer is {2 + k}." for k in (3, 3, 3, 4, 3)]
    assert [final_answer(s, "boxed") for s in samples] == [None] * 5
    assert [final_answer(s, "answer_is") for s in samples] == ["5", "5", "5", "6", "5"]


def test_answer_is_reads_after_the_thinking_when_there_is_a_final_part() -> None:
    text = "<think>the answer is 3? no.</think>The answer is 4."
    assert answer_is_answer(text) == "4"
    assert answer_is_answer("<think>so the answer is 3") == "3"  # never closed: all of it


def test_answer_is_stops_at_the_end_of_the_stated_line() -> None:
    """ESC takes everything after the phrase (its few-shot samples stop at the next
    question); Ponder takes that line up to its sentence's end, so an answer followed by
    the model's next made-up question reads the same."""
    assert answer_is_answer("The answer is 72.\n\nQ: Tom has 3 apples...") == "72"
    # The phrase with nothing after it: no answer, as ESC's empty prediction.
    assert answer_is_answer("The answer is \n") is None


def test_adaptive_consistency_reads_answer_is_in_the_last_line_only() -> None:
    """AC's ``TextInterface.extract_answer`` (``scripts/pal/core/interface.py:85-96``):
    "answer is" in the last line, else the empty string (no fallback). On its few-shot
    samples (one "So the answer is X." last line) ``answer_is`` reads the same; where the
    last line lacks the phrase AC has no answer, and ``answer_is`` reads the box or the
    last number (the difference a recipe names)."""
    sample = "Olivia had 23 dollars and spent 15.\nSo the answer is 8."
    assert answer_is_answer(sample) == "8"  # AC: "8" (after "answer is", "." dropped)
    no_phrase = "Olivia had 23 dollars and spent 15, so 8 are left."
    assert answer_is_answer(no_phrase) == "8"  # AC: "" (no answer)


# -- after_answer_marker: s1 ----------------------------------------------------------------
S1_MARKERS = ThinkingMarkers("<|im_start|>think", "<|im_start|>answer")


def test_after_answer_marker_reads_the_box_then_answer_colon_as_s1_does() -> None:
    """s1's reader, ``eval/lm-evaluation-harness/lm_eval/tasks/aime/utils.py:247-262``
    (simplescaling/s1 @ 77272c6e): the text after the last ``<|im_start|>answer\\n``
    (247-251), in it the last ``\\boxed{}`` (257-258), else the match of
    ``(?i)Answer\\s*:\\s*(.*)`` with DOTALL (line 35, 260-261). Worked by hand:
    """
    text = "<|im_start|>think\nAnswer: 7? \\boxed{7} no.<|im_start|>answer\nAnswer: \\boxed{8}"
    assert S1_MARKERS.answer(text, "after_answer_marker") == "8"
    text = "<|im_start|>think\nhmm \\boxed{7}<|im_start|>answer\nAnswer: 9"
    assert S1_MARKERS.answer(text, "after_answer_marker") == "9"  # the thinking's box: no
    assert S1_MARKERS.answer(text, "boxed") is None  # boxed has no "Answer:" fallback
    # "Final Answer:" matches too (the pattern is not anchored to a word start).
    assert after_answer_marker_answer("Final Answer: 42") == "42"
    assert after_answer_marker_answer("**answer** 42") is None


def test_after_answer_marker_reads_the_first_answer_colon_to_the_end() -> None:
    """With DOTALL, s1's ``re.findall`` (utils.py:260) has one match: the first "Answer:"
    takes the rest of the text, so ``matches[-1]`` is that one, and s1 hands it to an LLM
    to read (266-282). Ponder has no such judge: it takes that match's last non-empty
    line, which is the answer on s1's motivating case, "Answer: Here is the solution:\\n\\n10"
    (the comment on line 259)."""
    assert after_answer_marker_answer("Answer: Here is the solution:\n\n10") == "10"
    assert after_answer_marker_answer("Answer: 5\nAnswer: 6") == "Answer: 6"


def test_after_answer_marker_without_the_marker_reads_the_whole_text() -> None:
    """With no answer marker s1 reads the text after the last ``<|im_start|>`` less its
    first line (utils.py:252-255), which for a generation with no marker is all of it;
    ``boxed`` would read nothing from a thinking that never closed."""
    text = "<|im_start|>think\nso \\boxed{4}"
    assert S1_MARKERS.answer(text, "after_answer_marker") == "4"
    assert S1_MARKERS.answer(text, "boxed") is None


@pytest.mark.parametrize(
    ("answer_format", "expected"),
    [("boxed", False), ("boxed_anywhere", True), ("answer_is", True), ("lenient", True)],
)
def test_the_grader_reads_in_the_new_formats(answer_format: AnswerFormat, expected: bool) -> None:
    grader = ExactGrader(answer_format=answer_format)
    assert grader.read(r"<think>\boxed{6}</think>The answer is 6.") == ("6" if expected else None)
