"""Two experts: one that knows the full state, one that searches like a person would.

``expert_action`` reads the goal's target (object type, receptacle type, lamp, count,
treatment) and replans every step, so it also recovers from states a random agent
left (a wrong object in hand, an object already half-way).  It goes straight to the
object it wants, which no observation tells: the upper bound of the leaderboard.

``search_expert_action`` finds the object the way ALFWorld's hand-coded expert does:
it visits the receptacles in the order the room description lists them, opening
closed ones, and takes the object once it sees it; from there it acts as the planner.
Its choices follow from the text an agent sees, which makes it the demonstrator to
imitate.  Each command either returns is admissible in the current state.
"""

from __future__ import annotations

from typing import Any

from gigpo_gym.envs.alfworld.catalog import TREATMENT_RECEPTACLE
from gigpo_gym.envs.alfworld.engine import Engine
from gigpo_gym.envs.alfworld.world import CLEAN, COOL, HOT, World

_TREAT_FLAG = {"clean": CLEAN, "heat": HOT, "cool": COOL}


class ExpertError(RuntimeError):
    """The expert found no way forward (the task is unsolvable from here)."""


def expert_action(engine: Engine) -> str:
    """The next command of an expert plan from the engine's current state."""
    w, s = engine.world, engine.state
    if engine.won:
        return "look"
    t = w.target
    recs, objs = w.receptacles, w.objects
    want = t["otype"]
    flag = _TREAT_FLAG.get(t["treat"] or "", 0)

    def here(r: int) -> bool:
        return recs[r].loc == s.agent_loc

    def reach(r: int) -> str | None:
        """Go to / open ``r`` if needed; None when it is reachable and open."""
        if not here(r):
            return f"go to {recs[r].name}"
        if recs[r].openable and r not in s.opened:
            return f"open {recs[r].name}"
        return None

    def take(candidates: list[int]) -> str:
        best = None
        for o in candidates:
            for r in s.obj_in[o]:
                if recs[r].loc is None:
                    continue
                cost = (0 if here(r) else 2) + (1 if recs[r].openable and r not in s.opened else 0)
                if best is None or cost < best[0]:
                    best = (cost, o, r)
        if best is None:
            raise ExpertError(f"no reachable {want} left in {w.task_id}")
        _, o, r = best
        return reach(r) or f"take {objs[o].name} from {recs[r].name}"

    def put(o: int, dests: list[int]) -> str:
        dests = [r for r in dests if recs[r].loc is not None]
        if not dests:
            raise ExpertError(f"nowhere to put {objs[o].name} in {w.task_id}")
        r = min(dests, key=lambda r: (0 if here(r) else 2) + (1 if recs[r].openable and r not in s.opened else 0))
        return reach(r) or w.put_template.format(o=objs[o].name, r=recs[r].name)

    held = s.held
    is_good = (lambda o: objs[o].otype == want and "pickupable" in objs[o].props)

    if t["task_type"] == "look":
        if held >= 0 and is_good(held):
            lamps = [(o, r) for o, item in enumerate(objs) if item.otype == t["toggle"] for r in s.obj_in[o]
                     if recs[r].loc is not None]
            if not lamps:
                raise ExpertError(f"no {t['toggle']} in {w.task_id}")
            for o, r in lamps:
                if here(r):
                    return f"use {objs[o].name}"
            return f"go to {recs[lamps[0][1]].name}"
        if held >= 0:
            return _put_away(w, s, held, put)
        return take([o for o in range(len(objs)) if is_good(o)])

    dests = [r for r, rec in enumerate(recs) if rec.rtype == t["rtype"] and rec.loc is not None]
    if not dests:
        raise ExpertError(f"no {t['rtype']} in {w.task_id}")

    def done_in(r: int) -> list[int]:
        return [o for o in s.contents[r] if is_good(o) and (s.flags[o] & flag) == flag]

    dest = max(dests, key=lambda r: (len(done_in(r)), -r)) if t["count"] > 1 else None
    if held >= 0 and is_good(held):
        if flag and not s.flags[held] & flag:
            appliances = [r for r, rec in enumerate(recs) if rec.rtype == TREATMENT_RECEPTACLE[t["treat"]]
                          and rec.loc is not None]
            if not appliances:
                raise ExpertError(f"no {TREATMENT_RECEPTACLE[t['treat']]} in {w.task_id}")
            r = next((r for r in appliances if here(r)), appliances[0])
            return f"{t['treat']} {objs[held].name} with {recs[r].name}" if here(r) else f"go to {recs[r].name}"
        return put(held, [dest] if dest is not None else dests)
    if held >= 0:
        return _put_away(w, s, held, put)
    placed = set(done_in(dest)) if dest is not None else set()
    return take([o for o in range(len(objs)) if is_good(o) and o not in placed])


def _put_away(w: World, s: Any, held: int, put: Any) -> str:
    """Put a wrong object down where it fits (preferring where the agent stands)."""
    otype = w.objects[held].otype
    fits = [r for r, rec in enumerate(w.receptacles) if (rec.rtype, otype) in w.can_contain]
    return put(held, fits)


def expert_plan(engine: Engine, max_steps: int = 200) -> list[str]:
    """Play the expert to the end on ``engine`` (mutates it); returns the commands."""
    plan = []
    while not engine.won and len(plan) < max_steps:
        cmd = expert_action(engine)
        _, valid = engine.step(cmd)
        if not valid:
            raise ExpertError(f"expert proposed an inadmissible command {cmd!r} in {engine.world.task_id}")
        plan.append(cmd)
    return plan


def search_expert_action(engine: Engine) -> str:
    """The next command of a search: sweep the listed receptacles until the object is in view."""
    w, s = engine.world, engine.state
    if engine.won or s.held >= 0:
        return expert_action(engine)
    want = w.target["otype"]
    recs = w.receptacles
    here = [r for r, rec in enumerate(recs) if rec.loc is not None and rec.loc == s.agent_loc]
    for r in here:
        if recs[r].openable and r not in s.opened:
            return f"open {recs[r].name}"
    dests = {r for r, rec in enumerate(recs) if rec.rtype == w.target["rtype"]}
    for r in here:
        if r in dests and w.target["count"] > 1:
            continue  # the pick-two destination: what lies there is already placed
        if any(w.objects[o].otype == want and "pickupable" in w.objects[o].props for o in s.contents[r]):
            return expert_action(engine)  # in view: the planner takes it from here
    stops = list(dict.fromkeys(rec.loc for rec in recs if rec.loc is not None))
    following = stops[(stops.index(s.agent_loc) + 1) % len(stops)] if s.agent_loc in stops else stops[0]
    first = next(r for r, rec in enumerate(recs) if rec.loc == following)
    return f"go to {recs[first].name}"
