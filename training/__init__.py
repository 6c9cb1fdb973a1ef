"""Training models to use Ponder's scaffolds, with the very prompts serving uses.

- :mod:`training.collect`, :mod:`training.traces`: run a scaffold over a dataset through
  any engine and keep the typed traces.
- :mod:`training.data`: traces to SFT rows (TRL prompt/completion form), per step kind.
- :mod:`training.rewards`: answer correctness (math-verify, in a process pool), a judge
  rubric reward, a format reward.
- :mod:`training.rollouts`, :mod:`training.grpo`: GRPO whose rollout is a scaffold step.
- :mod:`training.sft`: SFT on the rows.
- :mod:`training.verl_loop`: the same rollout as a verl agent loop (multi-node, Ray).
- :mod:`training.cli`: ``ponder train``.
"""
