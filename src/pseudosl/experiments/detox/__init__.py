"""Detoxifying a language model with the pseudo-semantic loss (paper Section 5.3); see docs/detox.md.

Evaluation half: ``words`` (the forbidden word list), ``constraint`` (the no-forbidden-words
circuit over token windows), ``banning`` (the word-banning decoding baseline), ``scoring``
(toxicity scorers), ``metrics`` (Expected Maximum Toxicity, Toxicity Probability, word rate) and
``prompts`` (RealToxicityPrompts and corpus-derived prompt sets).

Training half: ``corpus`` (the English text corpus, optionally salted with forbidden words), ``pretrain``
(byte-level BPE + a small GPT-2 from scratch, on the shared harness), ``lm`` (loading, nucleus sampling --
plain, or kept inside the constraint by its logits processor or by locally constrained resampling --,
perplexity), ``generation`` (SGEAT's scored unprompted samples and the least-toxic-half split), ``config``
(``DetoxConfig``, ``presets/``), ``train`` (the experiment: base / SGEAT / PSL on
:mod:`pseudosl.experiments.harness`, and the constrained decoders' rows) and ``report`` (the paper-shaped
table and figures).  Commands: ``pseudosl detox pretrain|generate|train|eval``.
"""
