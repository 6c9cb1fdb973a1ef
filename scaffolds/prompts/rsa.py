"""RSA, recursive self-aggregation (arXiv 2509.26626): fold a few solutions into one.

Each aggregation step reads a handful of solutions drawn from the current population
and writes one solution of the next population.
"""

from scaffolds.prompts.sets import PromptSet
from scaffolds.prompts.template import Template

AGGREGATE = Template(
    "rsa_aggregate",
    "### Problem\n$problem\n\n"
    "### Attempts to combine\n$candidates\n\n"
    "### Instructions\n"
    "The $count attempts above were written separately, and each of them may contain "
    "errors. Read them critically: find the steps they agree on, check those, and find "
    "where and why they disagree. Then write one self-contained solution that takes the "
    "sound ideas from the attempts and fixes their mistakes; where every attempt goes "
    "wrong, work the problem out on your own. Do not refer to the attempts in your "
    "solution. Reason step by step, and end with your final answer within \\boxed{}.",
)

COMPACT_AGGREGATE = Template("rsa_aggregate", "$problem($candidates)")

SETS = (PromptSet.of("default", AGGREGATE), PromptSet.of("compact", COMPACT_AGGREGATE))
