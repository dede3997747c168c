"""The page model: what each WebShop page shows, as an ordered list of elements.

A page is what the original's HTML templates render, reduced to their visible
text nodes in document order: plain text, buttons, product links and option radio
labels, each element knowing its click text and whether it is selected.  The
``text`` / ``text_rich`` observations are rendered from this model (``render.py``);
an HTML renderer can be built from the same model.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gigpo_gym.envs.webshop.schema import Product

TEXT, BUTTON, LINK, OPTION = "text", "button", "link", "option"

# Page names (the session's ``page``).
SEARCH, RESULTS, ITEM, DESCRIPTION, FEATURES, REVIEWS, DONE = (
    "search", "results", "item", "description", "features", "reviews", "done")  # fmt: skip
SUB_PAGES = (DESCRIPTION, FEATURES, REVIEWS)

# Button labels of the original.
BACK_TO_SEARCH, NEXT_PAGE, PREV_PAGE, BUY_NOW, SEARCH_BUTTON = "Back to Search", "Next >", "< Prev", "Buy Now", "Search"
SUB_PAGE_BUTTONS = {DESCRIPTION: "Description", FEATURES: "Features", REVIEWS: "Reviews"}
#: Results per page (the original's PRODUCT_WINDOW).
PAGE_SIZE = 10


@dataclass(frozen=True)
class Element:
    """One visible piece of a page."""

    kind: str
    text: str
    #: What the element is (for renderers): "instruction", "title", "price", "option_name", ...
    role: str = ""
    #: Option name of an OPTION element.
    group: str | None = None
    #: A chosen option, or a product link already visited in this search session.
    selected: bool = False

    @property
    def click(self) -> str | None:
        """The text of ``click[...]`` that activates it (lower-cased), None for plain text."""
        if self.kind in (BUTTON, LINK):
            return self.text.lower()
        return self.text if self.kind == OPTION else None


@dataclass(frozen=True)
class Page:
    name: str
    elements: tuple[Element, ...]
    has_search_bar: bool = False

    def clickables(self) -> dict[str, Element]:
        """Click text -> element, in the original's order: buttons, then links, then options.

        A later element with the same click text replaces an earlier one but keeps its
        position (the original builds a dict the same way).
        """
        table: dict[str, Element] = {}
        for kind in (BUTTON, LINK, OPTION):
            for element in self.elements:
                if element.kind == kind:
                    table[element.click] = element
        return table


def _header(instruction: str) -> list[Element]:
    return [Element(TEXT, "Instruction:", "instruction_label"), Element(TEXT, instruction.strip(), "instruction")]


def search_page(instruction: str) -> Page:
    elements = [Element(TEXT, "WebShop", "logo"), *_header(instruction), Element(BUTTON, SEARCH_BUTTON, "search")]
    return Page(SEARCH, tuple(elements), has_search_bar=True)


def results_page(
    instruction: str, page_num: int, total: int, products: Sequence[Product], visited: Sequence[str]
) -> Page:
    elements = [*_header(instruction), Element(BUTTON, BACK_TO_SEARCH, "back_to_search")]
    elements.append(Element(TEXT, f"Page {page_num} (Total results: {total})", "page_info"))
    if page_num > 1:
        elements.append(Element(BUTTON, PREV_PAGE, "prev"))
    elements.append(Element(BUTTON, NEXT_PAGE, "next"))
    for product in products:
        elements.append(Element(LINK, product.asin, "asin", selected=product.asin in visited))
        elements.append(Element(TEXT, product.title.strip(), "title"))
        elements.append(Element(TEXT, product.price_tag, "price"))
    return Page(RESULTS, tuple(elements))


def _item_header(instruction: str) -> list[Element]:
    return [*_header(instruction), Element(BUTTON, BACK_TO_SEARCH, "back_to_search"), Element(BUTTON, PREV_PAGE, "prev")]


def item_page(instruction: str, product: Product, chosen: Mapping[str, str]) -> Page:
    elements = _item_header(instruction)
    chosen_values = set(chosen.values())
    for name, values in product.options.items():
        elements.append(Element(TEXT, name, "option_name"))
        elements.extend(Element(OPTION, v, "option", group=name, selected=v in chosen_values) for v in values)
    elements += [
        Element(TEXT, product.title.strip(), "title"),
        Element(TEXT, f"Price: {product.price_tag}", "price"),
        Element(TEXT, f"Rating: {product.rating}", "rating"),
        *(Element(BUTTON, label, name) for name, label in SUB_PAGE_BUTTONS.items()),
        Element(BUTTON, BUY_NOW, "buy"),
    ]
    return Page(ITEM, tuple(elements))


def sub_page(instruction: str, product: Product, which: str) -> Page:
    elements = _item_header(instruction)
    if which == DESCRIPTION:
        elements.append(Element(TEXT, product.description.strip(), "description"))
    elif which == FEATURES:
        elements.extend(Element(TEXT, b.strip(), "bullet") for b in product.bullets)
    else:
        for title, score, body in product.reviews:
            elements += [Element(TEXT, f'"{title}"', "review_title"), Element(TEXT, score, "review_score"),
                         Element(TEXT, body.strip(), "review_body")]  # fmt: skip
    return Page(which, tuple(elements))


def done_page(score: float) -> Page:
    elements = (
        Element(TEXT, "Thank you for shopping with us!", "thanks"),
        Element(TEXT, "Your score (min 0.0, max 1.0)", "score_label"),
        Element(TEXT, str(score), "score"),
    )
    return Page(DONE, elements)
