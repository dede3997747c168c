"""Observation text of a page model, in the original's ``text`` and ``text_rich`` modes.

``text``: the visible text nodes joined by `` [SEP] `` (empty ones dropped).
``text_rich``: one line per node; buttons as ``[button] X [button_]``, option labels
indented, the chosen ones as ``[clicked button] X [clicked button_]`` and announced
by a leading ``You have clicked X.`` line, product links on a line of their own
(``[clicked button]`` once visited).
"""

from __future__ import annotations

from gigpo_gym.envs.webshop.pages import BUTTON, LINK, OPTION, Page

OBSERVATION_MODES = ("text", "text_rich")


def render_text(page: Page) -> str:
    return " [SEP] ".join(e.text for e in page.elements if e.text)


def render_text_rich(page: Page) -> str:
    obs = ""
    for e in page.elements:
        if not e.text:
            continue
        if e.kind == BUTTON:
            piece = f"[button] {e.text} [button_]"
        elif e.kind == OPTION:
            if e.selected:
                piece = f"  [clicked button] {e.text} [clicked button_]"
                obs = f"You have clicked {e.text}.\n" + obs
            else:
                piece = f"  [button] {e.text} [button_]"
        elif e.kind == LINK:
            piece = f"\n[clicked button] {e.text} [clicked button_]" if e.selected else f"\n[button] {e.text} [button_]"
        else:
            piece = e.text
        obs += piece + "\n"
    return obs


RENDERERS = {"text": render_text, "text_rich": render_text_rich}
