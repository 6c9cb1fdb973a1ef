"""Reasoning Cache (arXiv 2602.03773): reason, summarize, reason again from the summary.

The problem comes first in every template so that all calls of one problem share a
prefix in the engine's cache.
"""

from scaffolds.prompts.sets import PromptSet
from scaffolds.prompts.template import Template

REASONING_START = Template(
    "rc_reasoning_start",
    "### Problem\n$problem\n\n"
    "### Instructions\n"
    "Solve the problem. Reason step by step, and end with your final answer "
    "within \\boxed{}.",
)

REASONING_CONTINUE = Template(
    "rc_reasoning_continue",
    "### Problem\n$problem\n\n"
    "### Summary of an earlier attempt\n$summary\n\n"
    "### Instructions\n"
    "The summary above describes earlier work on this problem and may contain mistakes. "
    "Improve on it: check its steps and results; if it is correct, confirm it by a "
    "different argument; if something is wrong, repair it or try another approach; if "
    "it stops before the end, carry it on. Reason step by step, and end with your final "
    "answer within \\boxed{}.",
)

SUMMARY = Template(
    "rc_summary",
    "### Problem\n$problem\n\n"
    "### Existing summary\n$summary\n\n"
    "### Latest attempt\n$attempt\n\n"
    "### Instructions\n"
    "Write an updated summary of the work on this problem. Describe the strategy, the "
    "facts and results used, the checks made and the key calculations, and relate it to "
    "the existing summary: keep what still stands and say what the latest attempt "
    "changed. Write as the person who did the work, in the first person, in at most two "
    "paragraphs of plain prose with no headers. Include only reasoning that appears in "
    "the latest attempt or the existing summary; do not work anything out anew.",
)

NO_SUMMARY = "(none: this is the first attempt)"

COMPACT_REASONING_START = Template("rc_reasoning_start", "$problem")
COMPACT_REASONING_CONTINUE = Template("rc_reasoning_continue", "$problem|$summary>")
COMPACT_SUMMARY = Template("rc_summary", "$problem|$summary|$attempt#")
COMPACT_NO_SUMMARY = ""

SETS = (
    PromptSet.of("default", REASONING_START, REASONING_CONTINUE, SUMMARY, rc_no_summary=NO_SUMMARY),
    PromptSet.of(
        "compact",
        COMPACT_REASONING_START,
        COMPACT_REASONING_CONTINUE,
        COMPACT_SUMMARY,
        rc_no_summary=COMPACT_NO_SUMMARY,
    ),
)
