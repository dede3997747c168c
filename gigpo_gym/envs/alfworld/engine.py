"""The native ALFWorld engine: the PDDL domain's actions and the grammar's texts.

Pure logic, no gymnasium.  It follows ``alfworld/data/alfred.pddl`` (action
preconditions and effects) and ``alfred.twl2`` (command templates and feedback),
as TextWorld's ``PddlEnv`` plays them:

* the admissible commands are every applicable grounded action's command,
  de-duplicated and sorted (``sorted(set(...))``); going to a receptacle at the
  agent's own location is not applicable (the planner drops no-op operators), and
  ``examine O`` is listed only for the held object (the branch of the domain's
  disjunctive precondition the planner keeps);
* a command that is not admissible (after ``strip()``) answers ``Nothing happens.``;
* listings follow sorted fact order, i.e. entity-id order (``World`` keeps it);
* negative facts exist only where an effect deleted a fact (taking an object adds
  ``not_inreceptacle(o, r)``, which the ``look`` text uses), and ``use`` always
  answers "You turn on ..." because ``isToggled`` is never deleted;
* TextWorld applies every effect atom of an action, conditional ones included, in
  order, so ``use`` leaves ``isOn`` false whatever it was (found by the
  differential test against TextWorld; it shows only in the anchor).
"""

from __future__ import annotations

from array import array
from bisect import insort

from gigpo_gym.core.anchor import digest
from gigpo_gym.envs.alfworld.catalog import KNIVES
from gigpo_gym.envs.alfworld.world import CLEAN, COOL, HOT, ON, SLICED, TOGGLED, World

NOTHING = "Nothing happens."
BANNER = "-= Welcome to TextWorld, ALFRED! =-"
HELP = (
    "Available commands:\n"
    "  look:                             look around your current location\n"
    "  inventory:                        check your current inventory\n"
    "  go to (receptacle):               move to a receptacle\n"
    "  open (receptacle):                open a receptacle\n"
    "  close (receptacle):               close a receptacle\n"
    "  take (object) from (receptacle):  take an object from a receptacle\n"
    "  move (object) to (receptacle):  place an object in or on a receptacle\n"
    "  examine (something):              examine a receptacle or an object\n"
    "  use (object):                     use an object\n"
    "  heat (object) with (receptacle):  heat an object using a receptacle\n"
    "  clean (object) with (receptacle): clean an object using a receptacle\n"
    "  cool (object) with (receptacle):  cool an object using a receptacle\n"
    "  slice (object) with (object):     slice an object using a sharp object\n"
)


def display_list(items: list[str]) -> str:
    """TextWorld's list rendering: ``nothing`` / ``a`` / ``a, and b`` / ``a, b, and c``."""
    if not items:
        return "nothing"
    if len(items) == 1:
        return items[0]
    return ", ".join(items[:-1]) + ", and " + items[-1]


class State:
    """The dynamic facts: agent location, held object, containment, flags, opened."""

    __slots__ = ("agent_loc", "held", "obj_in", "obj_loc", "opened", "flags", "not_in", "contents", "first", "multi")

    def __init__(self, world: World):
        init = world.init
        self.agent_loc = init.agent_loc
        self.held = init.held
        self.obj_in = list(init.obj_in)
        self.obj_loc = array("i", init.obj_loc)
        self.opened = set(init.opened)
        self.flags = array("i", init.flags)
        # The only receptacle of each object (-1: none or several); ``multi`` says
        # whether any object starts in several (possible in real game files).
        self.first = array("i", [recs[0] if len(recs) == 1 else -1 for recs in init.obj_in])
        self.multi = any(len(recs) > 1 for recs in init.obj_in)
        self.not_in: set[tuple[int, int]] = set()
        self.contents: list[list[int]] = [[] for _ in world.receptacles]
        for o, recs in enumerate(self.obj_in):
            for r in recs:
                self.contents[r].append(o)

    def key(self) -> str:
        """Compact canonical text of the whole dynamic state (fixed layout, no hashing)."""
        multi = [(o, recs) for o, recs in enumerate(self.obj_in) if len(recs) > 1] if self.multi else ""
        return (
            f"{self.agent_loc}|{self.held}|{sorted(self.opened)}|{sorted(self.not_in)}|{multi}|"
            f"{self.first.tobytes().hex()}|{self.obj_loc.tobytes().hex()}|{self.flags.tobytes().hex()}"
        )

    def set_receptacles(self, o: int, recs: tuple[int, ...]) -> None:
        self.obj_in[o] = recs
        self.first[o] = recs[0] if len(recs) == 1 else -1


class Engine:
    """Plays one ``World``: ``reset() -> intro``, ``step(cmd) -> (feedback, valid)``."""

    def __init__(self, world: World):
        self.world = world
        recs, objs = world.receptacles, world.objects
        self._rnames = [r.name for r in recs]
        self._onames = [o.name for o in objs]
        # Per-world tables, shared by every engine playing the world.
        tables = world.__dict__.setdefault("_engine_tables", {})
        if not tables:
            tables["recs_at"] = {}
            for i, r in enumerate(recs):
                if r.loc is not None:
                    tables["recs_at"].setdefault(r.loc, []).append(i)
            tables["goto"] = {}
        self._recs_at: dict[int, list[int]] = tables["recs_at"]
        self._goto_cache: dict[int, dict[str, tuple]] = tables["goto"]
        self._can = world.can_contain
        self._put = world.put_template
        self.state = State(world)
        self._admissible: dict[str, tuple] | None = None
        self._sorted: list[str] | None = None
        self._anchor: str | None = None
        self.won = False

    # -- public -------------------------------------------------------------------
    def reset(self) -> str:
        self.state = State(self.world)
        self._admissible = self._sorted = self._anchor = None
        self.won = bool(self.world.goal_check(self.state))
        return f"{BANNER}\n\n{self._look(intro=True)}\n\nYour task is to: {self.world.goal_text}."

    def admissible_commands(self) -> list[str]:
        if self._sorted is None:
            self._sorted = sorted(self._commands())
        return self._sorted

    def step(self, command: str) -> tuple[str, bool]:
        """Apply a command; an inadmissible one changes nothing and says so."""
        action = self._commands().get(command.strip())
        if action is None:
            return NOTHING, False
        text, changed = self._apply(action)
        if changed:
            self._admissible = self._sorted = self._anchor = None
            self.won = bool(self.world.goal_check(self.state))
        return text, True

    def state_key(self) -> str:
        """The task (which fixes the world and the goal) and the full dynamic state."""
        return f"{self.world.task_id}|{self.world.goal_text}|{self.state.key()}"

    def anchor(self) -> str:
        """Digest of the full world state and goal (same in every process; cached until it changes)."""
        if self._anchor is None:
            self._anchor = digest(self.state_key())
        return self._anchor

    # -- admissible commands ------------------------------------------------------
    def _goto(self, loc: int) -> dict[str, tuple]:
        cached = self._goto_cache.get(loc)
        if cached is None:
            cached = {
                f"go to {r.name}": ("goto", i)
                for i, r in enumerate(self.world.receptacles)
                if r.loc is not None and r.loc != loc
            }
            self._goto_cache[loc] = cached
        return cached

    def _commands(self) -> dict[str, tuple]:
        if self._admissible is not None:
            return self._admissible
        s, w = self.state, self.world
        objs, recs, rn, on = w.objects, w.receptacles, self._rnames, self._onames
        cmds = dict(self._goto(s.agent_loc))
        held = s.held
        held_item = objs[held] if held >= 0 else None
        for r in self._recs_at.get(s.agent_loc, ()):
            rec = recs[r]
            cmds[f"examine {rn[r]}"] = ("examine_r", r)
            visible = True
            if rec.openable:
                visible = r in s.opened
                if visible:
                    cmds[f"close {rn[r]}"] = ("close", r)
                else:
                    cmds[f"open {rn[r]}"] = ("open", r)
            for o in s.contents[r]:
                props = objs[o].props
                if visible and held < 0 and "pickupable" in props:
                    cmds[f"take {on[o]} from {rn[r]}"] = ("take", o, r)
                if "toggleable" in props:
                    cmds.setdefault(f"use {on[o]}", ("use", o))
            if held_item is not None:
                if visible and (rec.rtype, held_item.otype) in self._can:
                    cmds[self._put.format(o=on[held], r=rn[r])] = ("put", held, r)
                if rec.rtype == "Microwave" and "heatable" in held_item.props:
                    cmds[f"heat {on[held]} with {rn[r]}"] = ("heat", held, r)
                elif rec.rtype == "SinkBasin" and "cleanable" in held_item.props:
                    cmds[f"clean {on[held]} with {rn[r]}"] = ("clean", held, r)
                elif rec.rtype == "Fridge" and "coolable" in held_item.props:
                    cmds[f"cool {on[held]} with {rn[r]}"] = ("cool", held, r)
        if held_item is not None:
            cmds.setdefault(f"examine {on[held]}", ("examine_o", held))
            if held_item.otype in KNIVES:
                for o, loc in enumerate(s.obj_loc):
                    if loc == s.agent_loc and "sliceable" in objs[o].props:
                        cmds[f"slice {on[o]} with {on[held]}"] = ("slice", o, held)
        cmds["inventory"] = ("inventory",)
        cmds["look"] = ("look",)
        cmds["help"] = ("help",)
        self._admissible = cmds
        return cmds

    # -- effects and texts --------------------------------------------------------
    def _apply(self, action: tuple) -> tuple[str, bool]:
        s, rn, on = self.state, self._rnames, self._onames
        kind = action[0]
        if kind == "goto":
            r = action[1]
            s.agent_loc = self.world.receptacles[r].loc
            return f"You arrive at {rn[r]}. {self._examine_r(r)}", True
        if kind == "open":
            s.opened.add(action[1])
            return f"You open the {rn[action[1]]}. {self._examine_r(action[1])}", True
        if kind == "close":
            s.opened.discard(action[1])
            return f"You close the {rn[action[1]]}.", True
        if kind == "take":
            o, r = action[1], action[2]
            s.set_receptacles(o, tuple(x for x in s.obj_in[o] if x != r))
            s.contents[r].remove(o)
            s.held = o
            if s.obj_loc[o] == s.agent_loc:
                s.obj_loc[o] = -1
            s.not_in.add((o, r))
            return f"You pick up the {on[o]} from the {rn[r]}.", True
        if kind == "put":
            o, r = action[1], action[2]
            if r not in s.obj_in[o]:
                s.set_receptacles(o, tuple(sorted(s.obj_in[o] + (r,))))
                insort(s.contents[r], o)
            s.obj_loc[o] = s.agent_loc
            s.held = -1
            s.not_in.discard((o, r))
            return f"You move the {on[o]} to the {rn[r]}.", True
        if kind == "examine_r":
            return self._examine_r(action[1]), False
        if kind == "examine_o":
            return self._examine_o(action[1]), False
        if kind == "use":
            o = action[1]
            # TextWorld applies both of the domain's conditional isOn effects in turn
            # (add isOn, then delete it), so a used object is never on; only
            # isToggled (which the goal reads) sticks.
            s.flags[o] = (s.flags[o] & ~ON) | TOGGLED
            return f"You turn on the {on[o]}.", True
        if kind in ("heat", "cool", "clean"):
            o, r = action[1], action[2]
            if kind == "heat":
                s.flags[o] = (s.flags[o] | HOT) & ~COOL
            elif kind == "cool":
                s.flags[o] = (s.flags[o] | COOL) & ~HOT
            else:
                s.flags[o] |= CLEAN
            return f"You {kind} the {on[o]} using the {rn[r]}.", True
        if kind == "slice":
            s.flags[action[1]] |= SLICED
            return f"You sliced the {on[action[1]]} with the {on[action[2]]}.", True
        if kind == "inventory":
            if s.held >= 0:
                return f"You are carrying: a {on[s.held]}.", False
            return "You are not carrying anything.", False
        if kind == "look":
            return self._look(intro=False), False
        return HELP, False

    def _examine_r(self, r: int) -> str:
        s, rec, name = self.state, self.world.receptacles[r], self._rnames[r]
        if rec.openable and r not in s.opened:
            return f"The {name} is closed."
        seen = display_list([f"a {self._onames[o]}" for o in s.contents[r]])
        if rec.openable:
            return f"The {name} is open. In it, you see {seen}."
        return f"On the {name}, you see {seen}."

    def _examine_o(self, o: int) -> str:
        item, name, f = self.world.objects[o], self._onames[o], self.state.flags[o]
        if "isreceptacleobject" in item.props:
            inner = self.world.inner_objects.get(o, ())
            return f"This is a normal {name}. In it, you see {display_list([f'a {self._onames[i]}' for i in inner])}."
        clean, hot, cool, sliced = f & CLEAN, f & HOT, f & COOL, f & SLICED
        if sliced:
            if clean and hot:
                return f"This is a hot and clean sliced {name}."
            if clean and cool:
                return f"This is a cool and clean sliced {name}."
            if clean:
                return f"This is a clean sliced {name}."
            if hot:
                return f"This is a hot sliced {name}."
            if cool:
                return f"This is a cool sliced {name}."
        if clean and hot:
            return f"This is a hot and clean {name}."
        if clean and cool:
            return f"This is a cool and clean {name}."
        if hot:
            return f"This is a hot {name}."
        if clean:
            return f"This is a clean {name}."
        if cool:
            return f"This is a cold {name}."
        if "toggleable" in item.props and f & TOGGLED:
            return f"This {name} is on."
        if "sliceable" in item.props and sliced:
            return f"This is a sliced {name}."
        return f"There's nothing special about {name}."

    def _look(self, intro: bool) -> str:
        s = self.state
        here = self._recs_at.get(s.agent_loc, [])
        if here:
            floor = [
                f"a {self._onames[o]}"
                for o, loc in enumerate(s.obj_loc)
                if loc == s.agent_loc
                for r in here
                if (o, r) in s.not_in
            ]
            facing = display_list([self._rnames[r] for r in here])
            return f"You are facing the {facing}. Next to it, you see {display_list(floor)}."
        # The intro lists every receptacle (no location bound); ``look`` only those here.
        seen = []
        if intro:
            seen = [f"a {self._rnames[r]}" for r, rec in enumerate(self.world.receptacles) if rec.loc is not None]
        return f"You are in the middle of a room. Looking quickly around you, you see {display_list(seen)}."

