"""The evaluation core, shared by ``ponder eval``, training rewards and the experiments, so a
training reward and the eval metric cannot drift:

- :mod:`~scaffolds.evaluation.problems`: the problem type (:class:`ProblemRow`) and its one
  loader (JSONL, Batch API files, Hugging Face datasets);
  :mod:`~scaffolds.evaluation.synthetic` and :mod:`~scaffolds.evaluation.addition_task`
  make synthetic ones;
- :mod:`~scaffolds.evaluation.answers`: final answers and their equivalence, checked in a
  pool under a time limit by :mod:`~scaffolds.evaluation.answer_pool`;
- :mod:`~scaffolds.evaluation.grading`: graders (math-verify, exact, the rubric judge) with
  the one judge prompt, default rubric and ``parse_score``;
- :mod:`~scaffolds.evaluation.loop`: the evaluation loop (problems x samples through an
  "answer one problem" coroutine, graded, stored in a resumable
  :mod:`~scaffolds.evaluation.results` file, with progress);
- :mod:`~scaffolds.evaluation.stats`: accuracy with its 95% interval over problems and the
  one paired difference.

>>> from scaffolds.evaluation.problems import ProblemRow
>>> ProblemRow("p1", "1+1=", "2").row()
{'id': 'p1', 'problem': '1+1=', 'answer': '2'}
"""
