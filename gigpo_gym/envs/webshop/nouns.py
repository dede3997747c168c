"""Product-type nouns of a title, for the type term of the reward.

The original tags titles with spaCy and keeps the tokens tagged NOUN or PROPN,
lower-cased.  spaCy and its English model are not on this package's dependency
list, so the extractor is chosen once:

1. a spaCy pipeline, when ``spacy`` and a model (``en_core_web_sm`` by default,
   ``$GIGPO_WEBSHOP_SPACY_MODEL`` to override) are installed: the original rule;
2. otherwise a documented deterministic fallback (:func:`fallback_nouns`): the
   alphabetic tokens of the title that are not English function words,
   adjectives of colour/size/material/quality, or units and counters.

Products of the embedded catalog carry their own nouns (the generator knows which
words of a title are nouns and brand names), so they need neither.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
from collections.abc import Callable

from gigpo_gym.envs.webshop.normalize import COLOR_WORDS

_TOKEN = re.compile(r"[a-z][a-z'\-]*[a-z]|[a-z]")

#: Words the fallback never counts as nouns (function words and frequent title adjectives).
NOT_NOUNS: frozenset[str] = frozenset(
    """a an the and or nor but of for with without in on at to from by as into onto over under up down
    off out about above below between through per via than then so very too also only just not no
    is are be been being was were has have had do does did can could will would should may might must
    this that these those it its it's their your our my his her they we you i me us them he she him
    all any each every both either neither some many much more most less least few other another such
    own same new old best better good great nice fine premium perfect ideal classic modern vintage
    portable compatible adjustable durable comfortable lightweight heavy light soft hard smooth thick
    thin large small big little long short tall wide narrow mini extra super ultra high low full half
    double single triple multi multiple universal professional natural organic fresh pure real true
    waterproof wireless rechargeable non free easy quick fast slow hot cold warm cool dry wet clean
    men's women's kid's kids' women men unisex plus sized casual formal elegant cute pretty beautiful
    stylish fashion fashionable decorative original official genuine authentic assorted various
    inch inches ft feet cm mm oz ounce ounces lb lbs pound pounds ml l kg g gb tb mah w v pcs pc pack
    packs count ct piece pieces set sets pair pairs x xl xxl s m
    """.split()
) | frozenset(COLOR_WORDS)


def fallback_nouns(title: str) -> frozenset[str]:
    """Deterministic approximation of spaCy's NOUN/PROPN tokens of ``title``.

    >>> sorted(fallback_nouns("PEAK High Top Mens Basketball Shoes, Black"))
    ['basketball', 'mens', 'peak', 'shoes', 'top']
    """
    return frozenset(t for t in _TOKEN.findall(title.lower()) if t not in NOT_NOUNS)


def _spacy_extractor(model: str) -> Callable[[str], frozenset[str]] | None:
    if importlib.util.find_spec("spacy") is None:
        return None
    import spacy  # optional: the original's tagger

    try:
        nlp = spacy.load(model, disable=["parser", "ner", "lemmatizer"])
    except OSError:  # spaCy without the model
        return None

    def nouns(title: str) -> frozenset[str]:
        return frozenset(t.text.lower() for t in nlp(title) if t.pos_ in ("NOUN", "PROPN"))

    return nouns


@functools.lru_cache(maxsize=1)
def _extractor() -> tuple[str, Callable[[str], frozenset[str]]]:
    model = os.environ.get("GIGPO_WEBSHOP_SPACY_MODEL", "en_core_web_sm")
    spacy_nouns = _spacy_extractor(model)
    if spacy_nouns is not None:
        return f"spacy:{model}", spacy_nouns
    return "fallback", fallback_nouns


def noun_extractor_name() -> str:
    """Which extractor titles without their own nouns go through ("spacy:<model>" or "fallback")."""
    return _extractor()[0]


@functools.lru_cache(maxsize=65536)
def title_nouns(title: str) -> frozenset[str]:
    """The nouns of ``title`` by the installed extractor (cached: titles repeat across episodes)."""
    return _extractor()[1](title)
