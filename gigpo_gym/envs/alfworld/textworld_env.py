"""``gigpo_gym/ALFWorld-TextWorld-v0``: ALFWorld on the reference TextWorld engine.

Description
    The same tasks, kwargs and info keys as ``gigpo_gym/ALFWorld-v0``, played by the
    engine ALFWorld itself uses: TextWorld's ``PddlEnv`` (fast-downward grounds the
    ALFRED PDDL domain) wrapped in ALFWorld's ``AlfredDemangler(shuffle=False)`` and
    ``AlfredInfos``, as ``AlfredTWEnv`` builds it.  Real ``game.tw-pddl`` files are
    played as they are; generated households are first exported as game files
    (``export.py``, cached under ``$GIGPO_GYM_CACHE/alfworld``).  Use it to check the
    native engine or to report numbers on the original engine; it is about a
    thousand times slower per step.
Observation
    TextWorld's ``feedback``: the intro (banner, room, task) after ``reset``, the
    command's feedback after a step.
Actions
    A command string.  ``action_valid`` says whether it (stripped) was admissible;
    anything else answers TextWorld's ``Nothing happens.``.
Rewards
    1.0 on the step that wins (TextWorld's ``won``), else 0.0.
Termination
    ``terminated`` when won; ``truncated`` after 50 steps (registry).
Registered ids and kwargs
    ``gigpo_gym/ALFWorld-TextWorld-v0`` (extra ``[alfworld]``): ``split``,
    ``data_dir``, ``task_types``, ``seed``, ``num_tasks``, as the native env.
Info
    The contract keys plus ``gamefile`` (the file TextWorld plays), ``goal`` and
    ``anchor_text``.  ``anchor`` is computed from TextWorld's own facts with the
    native env's state digest, so both envs give the same anchor in the same state.
Data
    ``data_dir`` / ``$ALFWORLD_DATA`` as the native env; otherwise generated tasks.
"""

from __future__ import annotations

import warnings
from array import array
from typing import Any

from gigpo_gym.core.anchor import digest
from gigpo_gym.core.data import cache_dir
from gigpo_gym.core.env import TextEnv
from gigpo_gym.envs.alfworld.engine import State
from gigpo_gym.envs.alfworld.gamefile_writer import import_alfworld
from gigpo_gym.envs.alfworld.prompts import METADATA as PROMPTS
from gigpo_gym.envs.alfworld.tasks import GameFileTasks, GeneratedTasks, open_tasks
from gigpo_gym.envs.alfworld.world import FLAG_PREDICATES, World

WHAT = "gigpo_gym/ALFWorld-TextWorld-v0 (the reference TextWorld engine)"


def reference_engine() -> tuple[Any, Any, Any]:
    """``(textworld, AlfredDemangler, AlfredInfos)``, or an ImportError naming the extra."""
    try:
        import fast_downward  # noqa: F401  (PddlEnv cannot run without it)
        import textworld

        wrappers = import_alfworld("alfworld.agents.environment.alfred_tw_env")
    except ImportError as e:
        from gigpo_gym.core.extras import missing_extra_error

        raise missing_extra_error("alfworld", WHAT) from e
    return textworld, wrappers.AlfredDemangler, wrappers.AlfredInfos


class FactReader:
    """Turns TextWorld's facts into the native engine's ``State`` of one world.

    The anchor digests that state exactly as the native engine does, so an anchor
    match between the two engines means the same dynamic state.  Facts that no
    observation, command or goal reads (``checked``, ``holdsany``, negations other
    than ``not_inreceptacle``) are left out, as in the native state.
    """

    def __init__(self, world: World):
        self.world = world
        self.rec = {r.id.lower(): i for i, r in enumerate(world.receptacles)}
        self.obj = {o.id.lower(): i for i, o in enumerate(world.objects)}
        self.loc = {loc.lower(): i for i, loc in enumerate(world.locations)}

    def state(self, facts: list[Any]) -> State:
        state = State(self.world)
        n = len(self.world.objects)
        obj_in: list[list[int]] = [[] for _ in range(n)]
        obj_loc, flags = array("i", [-1] * n), array("i", [0] * n)
        state.held, state.opened, state.not_in = -1, set(), set()
        rec, obj, loc = self.rec, self.obj, self.loc
        for fact in facts:
            name, args = fact.name, [v.name for v in fact.arguments]
            if name == "atlocation" and args[1] in loc:
                state.agent_loc = loc[args[1]]
            elif name == "holds" and args[1] in obj:
                state.held = obj[args[1]]
            elif name in ("inreceptacle", "not_inreceptacle") and args[0] in obj and args[1] in rec:
                pair = (obj[args[0]], rec[args[1]])
                if name == "inreceptacle":
                    obj_in[pair[0]].append(pair[1])
                else:
                    state.not_in.add(pair)
            elif name == "objectatlocation" and args[0] in obj and args[1] in loc:
                obj_loc[obj[args[0]]] = loc[args[1]]
            elif name == "opened" and args[0] in rec:
                state.opened.add(rec[args[0]])
            elif name in FLAG_PREDICATES and args[0] in obj:
                flags[obj[args[0]]] |= FLAG_PREDICATES[name]
        state.obj_loc, state.flags = obj_loc, flags
        state.obj_in = [tuple(sorted(recs)) for recs in obj_in]
        state.first = array("i", [recs[0] if len(recs) == 1 else -1 for recs in state.obj_in])
        state.multi = any(len(recs) > 1 for recs in obj_in)
        state.contents = [[] for _ in self.world.receptacles]
        for o, recs in enumerate(state.obj_in):
            for r in recs:
                state.contents[r].append(o)
        return state

    def anchor(self, facts: list[Any]) -> str:
        """The native engine's anchor of the state these facts describe."""
        key = self.state(facts).key()
        return digest(f"{self.world.task_id}|{self.world.goal_text}|{key}")


class ALFWorldTextWorldEnv(TextEnv):
    """The native env's contract on TextWorld's engine (see the module docstring)."""

    metadata: dict[str, Any] = {"render_modes": ["ansi"], "render_fps": 4, **PROMPTS}
    max_action_length = 1024

    def __init__(
        self,
        split: str = "train",
        data_dir: str | None = None,
        task_types: Any = None,
        seed: int = 0,
        num_tasks: int | None = None,
        render_mode: str | None = None,
    ):
        super().__init__(render_mode=render_mode)
        self._textworld, demangler, infos = reference_engine()
        self._wrappers = [demangler(shuffle=False), infos]
        self.tasks: GeneratedTasks | GameFileTasks = open_tasks(split, data_dir, task_types, seed, num_tasks)
        self.split = self.tasks.split
        self._tw: Any = None  # the wrapped PddlEnv, kept across resets (one fast-downward copy)
        self._loaded: str | None = None
        self._reader: FactReader | None = None
        self._state: Any = None

    # -- games ----------------------------------------------------------------------
    def game_file(self, index: int) -> str:
        """The ``game.tw-pddl`` of task ``index`` (generated tasks are exported once, then cached)."""
        if isinstance(self.tasks, GameFileTasks):
            return self.tasks.games[index][0]
        from importlib.metadata import version

        from gigpo_gym.envs.alfworld.export import EXPORT_VERSION, export_task
        from gigpo_gym.envs.alfworld.generator import GENERATOR_VERSION

        world = self.tasks.get(index)
        types = "all" if len(self.tasks.task_types) == 6 else "+".join(self.tasks.task_types)
        folder = f"gen{GENERATOR_VERSION}-seed{self.tasks.seed}-{types}"
        root = cache_dir("alfworld", f"textworld-v{EXPORT_VERSION}", f"alfworld-{version('alfworld')}", folder)
        path = root / world.task_id / "game.tw-pddl"
        if not path.is_file():
            export_task(world, root)
        return str(path)

    def _load(self, path: str) -> None:
        if path == self._loaded:
            return
        with warnings.catch_warnings():  # PddlEnv.load reads the file without closing it
            warnings.simplefilter("ignore", ResourceWarning)
            if self._tw is None:
                request = self._textworld.EnvInfos(won=True, admissible_commands=True, extras=["gamefile"])
                self._tw = self._textworld.start(path, request, wrappers=self._wrappers)
            else:
                self._tw.load(path)
        self._loaded = path

    # -- the contract ---------------------------------------------------------------
    def _info(self, obs: str, valid: bool) -> dict[str, Any]:
        state, world = self._state, self._reader.world
        return {
            "admissible_actions": list(state["admissible_commands"]),
            "anchor": self._reader.anchor(state["_facts"]),
            "action_valid": valid,
            "won": bool(state["won"]),
            "task_id": world.task_id,
            "task_type": world.task_type,
            "gamefile": self._loaded,
            "goal": world.goal_text,
            "anchor_text": obs,
        }

    def _reset(self, seed: int, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        if "task_id" in options:
            index = self.tasks.index_of(str(options["task_id"]))
        else:
            index = seed % len(self.tasks)
        world = self.tasks.get(index)
        self._load(self.game_file(index))
        if self._reader is None or self._reader.world is not world:
            self._reader = FactReader(world)
        self._state = self._tw.reset()
        obs = self._state.feedback
        return obs, self._info(obs, True)

    def _step(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        assert self._state is not None  # the base class checks reset() came first
        valid = action.strip() in self._state["admissible_commands"]
        self._state, _, _ = self._tw.step(action)
        obs, won = self._state.feedback, bool(self._state["won"])
        return obs, 1.0 if won else 0.0, won, self._info(obs, valid)

    # -- the planner ----------------------------------------------------------------
    def expert_plan(self) -> list[str]:
        """TextWorld's planner (fast-downward) from the current state: its ``policy_commands``."""
        if self._state is None:
            raise RuntimeError("call reset() before expert_plan()")
        if self._state["won"]:
            return []
        pddl = self._tw.unwrapped  # what PddlEnv computes for policy_commands, on demand only
        return list(pddl._pddl_state.replan(pddl._entity_infos))

    def expert_action(self) -> str:
        """The next command of the planner's plan from the current state (``look`` once won)."""
        plan = self.expert_plan()
        return plan[0] if plan else "look"

    @property
    def num_tasks(self) -> int:
        return len(self.tasks)

    def close(self) -> None:
        if self._tw is not None:
            self._tw.close()
            self._tw, self._loaded, self._state = None, None, None
        super().close()
