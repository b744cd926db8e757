"""Detoxifying a language model with the pseudo-semantic loss (paper Section 5.3); see docs/detox.md.

Evaluation half: ``words`` (the forbidden word list), ``constraint`` (the no-forbidden-words
circuit over token windows), ``banning`` (the word-banning decoding baseline), ``scoring``
(toxicity scorers), ``metrics`` (Expected Maximum Toxicity, Toxicity Probability) and
``prompts`` (RealToxicityPrompts and corpus-derived prompt sets).
"""
