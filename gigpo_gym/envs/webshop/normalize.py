"""Colour normalisation used by WebShop's option reward.

The original reward maps an option value to the first entry of a fixed colour list
that occurs in it as a substring ("dark blue" -> "blue", because "blue" precedes
"dark" alphabetically), so that near-synonymous colour names compare equal.  The
list and its order are facts of the benchmark; keep them unchanged.
"""

from __future__ import annotations

#: The benchmark's colour words, in the order they are tried.
COLOR_WORDS: tuple[str, ...] = (
    "alabaster", "apricot", "aqua", "ash", "asphalt", "azure",
    "banana", "beige", "black", "blue", "blush", "bordeaux", "bronze",
    "brown", "burgundy", "camel", "camo", "caramel", "champagne",
    "charcoal", "cheetah", "chestnut", "chocolate", "christmas", "coffee",
    "cognac", "copper", "coral", "cranberry", "cream", "crystal", "dark",
    "denim", "eggplant", "elephant", "espresso", "fuchsia", "gold", "granite",
    "grape", "graphite", "grass", "gray", "green", "grey", "heather", "indigo",
    "ivory", "ivy", "khaki", "lavender", "lemon", "leopard", "light", "lilac",
    "lime", "magenta", "maroon", "mauve", "merlot", "midnight", "mint", "mocha",
    "multicolor", "mushroom", "mustard", "natural", "navy", "nude", "olive",
    "orange", "peach", "pewter", "pink", "plum", "purple", "rainbow", "red",
    "rose", "royal", "rust", "sand", "sapphire", "seashell", "silver", "skull",
    "slate", "steel", "stone", "stonewash", "sunflower", "tan", "taupe", "teal",
    "tiger", "turquoise", "violet", "walnut", "wheat", "white", "wine", "yellow",
)  # fmt: skip


def normalize_color(value: str) -> str:
    """The first colour word found inside ``value`` (substring test), else ``value``.

    >>> normalize_color("dark blue"), normalize_color("rose gold"), normalize_color("xx-large")
    ('blue', 'gold', 'xx-large')
    """
    for color in COLOR_WORDS:
        if color in value:
            return color
    return value
