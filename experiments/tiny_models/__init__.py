"""The synthetic task the project trains and serves: three-digit addition.

``task`` generates the problems (train / validation / test never overlap), ``tokenizer``
builds the character tokenizer and its chat template, ``model`` the ~1M-parameter Qwen2,
``train`` trains it to a target accuracy and ships it to ``scaffolds/models/ponder-addition``, and
``check_vllm`` measures the shipped model under vLLM-CPU. The model reads the compact
prompt set (``347+589=``, ``347+589=[936,926]``).
"""
