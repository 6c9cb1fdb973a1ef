"""Verifiers: score candidate solutions, or the steps of partial ones.

The package is the verifiers' public API: import the names in ``__all__`` from here.

One protocol (:class:`~scaffolds.engines.protocol.Verifier`, next to the Engine protocol
the run kernel sees), three implementations:

- :class:`PoolingVerifier`: a reward model behind vLLM's pooling API, outcome or
  process (per-step) scores;
- :class:`GenerativeVerifier`: a served chat model's yes/no verdict, read from the
  logprobs of one generated token;
- :class:`LocalVerifier`: the same verdict from a transformers model in process (CPU).

A served model names its verifier in its config (``verifier``, or ``reward_url`` for a
pooling endpoint); a spec names another served model as a generative verifier
(``best_of_n(judge="verifier", verifier="NAME")``). Strategies score through
:func:`scaffolds.verifiers.use.score`, which traces and budgets every call.

>>> from scaffolds.engines.protocol import Verifier
>>> isinstance(PoolingVerifier("http://127.0.0.1:9/pooling", "rm"), Verifier)
True
"""

from scaffolds.verifiers.generative import VERIFY_TEMPLATE, GenerativeVerifier
from scaffolds.verifiers.local import LocalVerifier
from scaffolds.verifiers.pooling import PoolingVerifier

__all__ = ["VERIFY_TEMPLATE", "GenerativeVerifier", "LocalVerifier", "PoolingVerifier"]
