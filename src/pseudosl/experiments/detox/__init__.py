"""Detoxifying a language model with the pseudo-semantic loss (paper Section 5.3); see docs/detox.md.

Evaluation half: ``words`` (the forbidden word list), ``constraint`` (the no-forbidden-words
circuit over token windows), ``banning`` (the word-banning decoding baseline), ``scoring``
(toxicity scorers), ``metrics`` (Expected Maximum Toxicity, Toxicity Probability) and
``prompts`` (RealToxicityPrompts and corpus-derived prompt sets).

Training half: ``corpus`` (the English text corpus), ``pretrain`` (byte-level BPE + a small GPT-2 from
scratch, on the shared harness), ``lm`` (loading, nucleus sampling, perplexity), ``generation`` (SGEAT's
scored unprompted samples and the least-toxic-half split), ``config`` (``DetoxConfig``, ``presets/``),
``train`` (the experiment: base / SGEAT / PSL on :mod:`pseudosl.experiments.harness`) and ``report``
(the paper-shaped table and figures).  Commands: ``pseudosl detox pretrain|generate|train|eval``.
"""
