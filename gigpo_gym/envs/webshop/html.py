"""The page model as HTML: the same ``pages.Page`` the text env renders, as a web page.

Every element of the model becomes one DOM node carrying ``data-ws`` (its kind),
``data-role`` and, for options, ``data-group``; chosen options and visited product
links carry ``data-selected``.  Reading those nodes in document order (their
``textContent``) gives back the model, so a browser reads exactly the text env's
observation from the live DOM.  Clickables are submit buttons of one form; each
sends its element index, which the site maps back to the element's click text.

Elements are grouped into visual blocks (product cards, option groups, ...) for
people; grouping never reorders them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import jinja2
from markupsafe import Markup, escape

from gigpo_gym.envs.webshop import pages as P

TEMPLATES = Path(__file__).parent / "templates"
STATIC = Path(__file__).parent / "static"

#: Roles that open a new block (one product card, one option group, one review).
_STARTERS = {"asin", "option_name", "review_title"}
#: Block of each role where it does not continue the block before it.
_BLOCK = {
    "logo": "logo", "instruction_label": "instruction", "instruction": "instruction", "search": "search",
    "back_to_search": "nav", "page_info": "nav", "prev": "nav", "next": "nav",
    "asin": "card", "option_name": "options", "option": "options",
    "title": "product", "price": "product", "rating": "product",
    "buy": "buy", "description": "description", "bullet": "features", "review_title": "review",
    "thanks": "done", "score_label": "done", "score": "done",
}  # fmt: skip
#: Roles that stay in the block before them when it is one of these (a card's title and price).
_CONTINUES = {"title": {"card"}, "price": {"card"}, "option": {"options"}, "review_score": {"review"},
              "review_body": {"review"}}  # fmt: skip


@dataclass(frozen=True)
class Node:
    """One element of the page with its position (what a clickable submits)."""

    index: int
    element: P.Element


@dataclass(frozen=True)
class Block:
    kind: str
    nodes: tuple[Node, ...]


def page_blocks(page: P.Page) -> list[Block]:
    """Consecutive elements grouped into blocks, in the page model's order."""
    blocks: list[tuple[str, list[Node]]] = []
    for i, element in enumerate(page.elements):
        role = element.role
        current = blocks[-1][0] if blocks else None
        if role not in _STARTERS and current in _CONTINUES.get(role, ()):
            blocks[-1][1].append(Node(i, element))
            continue
        kind = "tabs" if element.kind == P.BUTTON and role in P.SUB_PAGE_BUTTONS else _BLOCK.get(role, "text")
        if role in _STARTERS or kind != current:
            blocks.append((kind, []))
        blocks[-1][1].append(Node(i, element))
    return [Block(kind, tuple(nodes)) for kind, nodes in blocks]


def exact_text(value: object) -> Markup:
    """HTML-escape ``value`` so the DOM's ``textContent`` gives it back unchanged.

    HTML parsing turns a raw carriage return into a line feed; a character
    reference survives, so CR is written as ``&#13;``.
    """
    return Markup(str(escape(str(value))).replace("\r", "&#13;"))


def make_environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=jinja2.select_autoescape(default=True, default_for_string=True),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["exact"] = exact_text
    env.globals.update(TEXT=P.TEXT, BUTTON=P.BUTTON, LINK=P.LINK, OPTION=P.OPTION)
    return env
