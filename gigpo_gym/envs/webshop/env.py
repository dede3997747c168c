"""``gigpo_gym/WebShop-v0``: find and buy the product an instruction describes.

Description
    A simulated web shop (the WebShop benchmark, Yao et al. 2022): a search page,
    result pages of 10 products (50 hits), item pages with options, description /
    features / reviews sub-pages.  The instruction names a product type, attributes,
    option values and a price cap.
Observation
    The current page as text: ``text`` mode joins the visible text with ``[SEP]``
    (the original's simple mode), ``text_rich`` marks buttons and chosen options.
Actions
    ``search[keywords]`` on the search page, ``click[text]`` for a button, a product
    asin or an option value of the current page (lower-cased, as the original).
    ``info["admissible_actions"]`` lists the valid clicks, plus ``search[<query>]``
    on the search page.  Any other text is a no-op with ``action_valid=False``.
Rewards
    0 until ``click[buy now]``; then the original's purchase score in [0, 1]
    (``reward.py``), also in ``info["score"]`` with its parts in ``info["reward_info"]``.
    ``won`` is score == 1.
Termination
    Buying ends the episode; 15 steps truncate it (registration).
Registered ids and kwargs
    ``gigpo_gym/WebShop-v0``: ``split`` ("train", "eval", "test", "gigpo_train", "all";
    positions 1500+, 500-1499, 0-499, 500+, all of the shuffled goal list),
    ``data_dir`` (real files; else ``$WEBSHOP_DATA``; else the embedded catalog),
    ``observation_mode`` ("text" | "text_rich"), ``num_products`` (embedded: the
    generated size, 1,000 by default; real files: the first N entries, of the 1k file
    unless N > 1,000), ``human_goals`` (None: human goals where
    ``items_human_ins.json`` exists, else the synthetic ``items_ins_v2`` goals),
    ``noun_extractor`` ("spacy": the original's title tagging, an ImportError naming
    the pip install when spaCy or its model is missing; "fallback": an approximation
    that needs neither and warns once).
Data
    Embedded: 1,000 generated products in the original's five categories and ~2,500
    human-style goals (``generator.py``).  Real: the original's JSON files (``loader.py``).
"""

from __future__ import annotations

import difflib
import os
from typing import Any

from gigpo_gym.core.anchor import digest
from gigpo_gym.core.data import resolve_data_dir
from gigpo_gym.core.env import TextEnv
from gigpo_gym.envs.webshop import DATA_ENV
from gigpo_gym.envs.webshop.engine import Session, WebShopEngine
from gigpo_gym.envs.webshop.expert import expert_action
from gigpo_gym.envs.webshop.goals import split_goals
from gigpo_gym.envs.webshop.pages import Page
from gigpo_gym.envs.webshop.prompts import METADATA as PROMPTS
from gigpo_gym.envs.webshop.render import OBSERVATION_MODES, RENDERERS
from gigpo_gym.envs.webshop.shop import load_shop
from gigpo_gym.envs.webshop.teacher import page_teacher_action

#: ``expert_action`` styles: the goal-aware expert, or the teacher that reads only the page.
EXPERT_STYLES = ("goal", "page")


class WebShopEnv(TextEnv):
    metadata = {**TextEnv.metadata, "observation_modes": OBSERVATION_MODES, **PROMPTS}
    max_action_length = 1024

    def __init__(
        self,
        split: str = "train",
        data_dir: str | os.PathLike | None = None,
        observation_mode: str = "text",
        num_products: int | None = None,
        human_goals: bool | None = None,
        noun_extractor: str = "spacy",
        render_mode: str | None = None,
    ):
        super().__init__(render_mode=render_mode)
        if observation_mode not in OBSERVATION_MODES:
            close = difflib.get_close_matches(str(observation_mode), OBSERVATION_MODES, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ValueError(f"observation_mode must be one of {list(OBSERVATION_MODES)}, got {observation_mode!r}{hint}")
        if num_products is not None and (isinstance(num_products, bool) or not isinstance(num_products, int) or num_products < 1):
            raise ValueError(f"num_products must be a positive int or None, got {num_products!r}")
        path = resolve_data_dir(data_dir, DATA_ENV)
        if path is None:
            num_products = num_products or 1000
        self.shop = load_shop(path, num_products, human_goals)
        self.goals = split_goals(self.shop.goals, split)
        if not self.goals:
            raise ValueError(
                f"split {split!r} is empty: the shop has {len(self.shop.goals)} goals and {split!r} starts further in"
            )
        self.split = split
        self.observation_mode = observation_mode
        self._render = RENDERERS[observation_mode]
        self.engine = WebShopEngine(self.shop, noun_extractor)
        self.session: Session | None = None
        self._page: Page | None = None
        self._goal_by_id = {g.task_id: g for g in self.shop.goals}

    # -- TextEnv ----------------------------------------------------------------------
    def _reset(self, seed: int, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        task_id = options.get("task_id")
        if task_id is not None:
            goal = self._goal_by_id.get(str(task_id))
            if goal is None:
                close = difflib.get_close_matches(str(task_id), list(self._goal_by_id), n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise ValueError(f"unknown WebShop task_id {task_id!r} (ids are 'webshop-<goal index>'){hint}")
        else:
            goal = self.goals[seed % len(self.goals)]
        self.session = self.engine.new_session(goal)
        return self._observe(valid=True)

    def _step(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        valid = self.engine.step(self.session, self._page, action)
        obs, info = self._observe(valid)
        purchase = self.session.purchase
        if purchase is None:
            return obs, 0.0, False, info
        return obs, purchase.score, True, info

    # -- helpers ----------------------------------------------------------------------
    def _observe(self, valid: bool) -> tuple[str, dict[str, Any]]:
        s = self.session
        self._page = self.engine.page(s)
        obs = self._render(self._page)
        state = s.state()
        if self.observation_mode == "text_rich":  # visited asins show in this mode
            state["visited"] = list(s.visited)
        info: dict[str, Any] = {
            "admissible_actions": self.engine.admissible(self._page),
            "anchor": digest(state),
            "anchor_text": obs,
            "action_valid": valid,
            "won": bool(s.purchase is not None and s.purchase.score == 1.0),
            "task_id": s.goal.task_id,
            "task_type": s.goal.category,
            "score": s.purchase.score if s.purchase else 0.0,
            "instruction": s.goal.instruction_text,
            "page": s.page,
        }
        if s.purchase is not None:
            info["reward_info"] = s.purchase.as_dict()
            info["purchased"] = {"asin": s.asin, "options": dict(s.options)}
        return obs, info

    def expert_action(self, style: str = "goal") -> str:
        """The next action of the scripted expert (``"goal"``) or of the page-reading teacher (``"page"``).

        ``"goal"`` knows the goal product and pages until it shows (``expert.py``): an
        upper bound.  ``"page"`` reads only the current page (``teacher.py``): a
        demonstrator whose every step a policy could take (``sft.expert_kwargs: {style: page}``).
        """
        if self.session is None:
            raise RuntimeError("call reset() before expert_action()")
        if style not in EXPERT_STYLES:
            raise ValueError(f"expert style must be one of {list(EXPERT_STYLES)}, got {style!r}")
        return expert_action(self.shop, self.session) if style == "goal" else page_teacher_action(self._page)
