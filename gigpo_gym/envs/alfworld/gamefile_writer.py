"""Write a ``World`` (e.g. a generated task) as an ALFWorld ``game.tw-pddl`` file.

So that generated tasks can be played by the reference engine (TextWorld's
``PddlEnv``) side by side with the native one.  The PDDL domain and the grammar
are ALFWorld's own files; by default they are read from an installed ``alfworld``
package (the ``[alfworld]`` extra), or passed in.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from gigpo_gym.core.data import write_atomically
from gigpo_gym.envs.alfworld.world import FLAG_PREDICATES, World

_PRED_CASE = {
    "inreceptacle": "inReceptacle", "objecttype": "objectType", "receptacletype": "receptacleType",
    "receptacleatlocation": "receptacleAtLocation", "objectatlocation": "objectAtLocation",
    "atlocation": "atLocation", "istoggled": "isToggled", "isclean": "isClean", "ishot": "isHot",
    "iscool": "isCool", "issliced": "isSliced", "ison": "isOn", "isreceptacleobject": "isReceptacleObject",
    "holdsany": "holdsAny", "cancontain": "canContain", "inreceptacleobject": "inReceptacleObject",
}


def _goal_sexpr(node: Any) -> str:
    op = node[0]
    if op in ("and", "or"):
        return f"({op} " + " ".join(_goal_sexpr(n) for n in node[1]) + ")"
    if op == "not":
        return f"(not {_goal_sexpr(node[1])})"
    if op == "=":
        return f"(= {node[1]} {node[2]})"
    if op in ("exists", "forall"):
        params = " ".join(f"{v} - {t}" for v, t in node[1])
        return f"({op} ({params}) {_goal_sexpr(node[2])})"
    return "(" + " ".join([_PRED_CASE.get(node[1], node[1])] + list(node[2])) + ")"


def problem_text(world: World) -> str:
    """The PDDL problem of ``world`` (objects, initial facts, goal)."""
    recs, objs, locs, init = world.receptacles, world.objects, world.locations, world.init
    otypes = sorted({o.otype for o in objs if o.otype})
    rtypes = sorted({r.rtype for r in recs if r.rtype})
    decl = ["agent1 - agent"]
    decl += [f"{o.id} - object" for o in objs] + [f"{t}Type - otype" for t in otypes]
    decl += [f"{r.id} - receptacle" for r in recs] + [f"{t}Type - rtype" for t in rtypes]
    decl += [f"{loc} - location" for loc in locs]
    facts = [f"(atLocation agent1 {locs[init.agent_loc]})"]
    for i, r in enumerate(recs):
        if r.rtype:
            facts.append(f"(receptacleType {r.id} {r.rtype}Type)")
        if r.loc is not None:
            facts.append(f"(receptacleAtLocation {r.id} {locs[r.loc]})")
        if r.openable:
            facts.append(f"(openable {r.id})")
        if i in init.opened:
            facts.append(f"(opened {r.id})")
    for o, item in enumerate(objs):
        if item.otype:
            facts.append(f"(objectType {item.id} {item.otype}Type)")
        facts += [f"({_PRED_CASE.get(p, p)} {item.id})" for p in sorted(item.props)]
        facts += [f"({_PRED_CASE[p]} {item.id})" for p, bit in FLAG_PREDICATES.items() if init.flags[o] & bit]
        facts += [f"(inReceptacle {item.id} {recs[r].id})" for r in init.obj_in[o]]
        if init.obj_loc[o] >= 0:
            facts.append(f"(objectAtLocation {item.id} {locs[init.obj_loc[o]]})")
    if init.held >= 0:
        facts.append(f"(holds agent1 {objs[init.held].id})")
    for outer, inner in sorted(world.inner_objects.items()):
        facts += [f"(inReceptacleObject {objs[i].id} {objs[outer].id})" for i in inner]
    facts += [f"(canContain {rt}Type {ot}Type)" for rt, ot in sorted(world.can_contain)]
    name = world.task_id.replace("/", "_")
    return "\n".join(
        [f"(define (problem plan_{name})", "(:domain alfred)", "(:objects", *decl, ")", "(:init", *facts, ")",
         f"(:goal {_goal_sexpr(world.goal)})", ")"]
    ) + "\n"


def import_alfworld(module: str = "alfworld") -> Any:
    """Import ``module`` of the ``alfworld`` package without its side effect on ``$ALFWORLD_DATA``.

    ``import alfworld`` sets ``ALFWORLD_DATA`` to its download cache (and creates
    that folder) when unset; the native env would then read that empty folder as
    the user's data.  The variable is put back as it was.
    """
    import importlib

    before = os.environ.get("ALFWORLD_DATA")
    try:
        return importlib.import_module(module)
    finally:
        if before is None:
            os.environ.pop("ALFWORLD_DATA", None)
        else:
            os.environ["ALFWORLD_DATA"] = before


def alfworld_logic_files() -> tuple[str, str]:
    """ALFWorld's PDDL domain and grammar texts from the installed ``alfworld`` package."""
    try:
        from importlib.resources import files

        import_alfworld()
        data = files("alfworld") / "data"
        return (data / "alfred.pddl").read_text(), (data / "alfred.twl2").read_text()
    except (ModuleNotFoundError, FileNotFoundError) as e:
        from gigpo_gym.core.extras import missing_extra_error

        raise missing_extra_error("alfworld", "writing ALFWorld game files") from e


def write_game_file(
    world: World,
    path: str | os.PathLike,
    domain: str | None = None,
    grammar: str | None = None,
    walkthrough: list[str] | None = None,
) -> Path:
    """Write ``world`` as a ``game.tw-pddl`` file the reference engine can play.

    ``walkthrough`` (commands that win, e.g. the expert's plan) is stored as real
    game files store theirs; TextWorld returns it as ``extra.walkthrough``.
    """
    if domain is None or grammar is None:
        domain, grammar = alfworld_logic_files()
    if "UNKNOWN GOAL" not in grammar:
        raise ValueError("grammar must be ALFWorld's alfred.twl2 with its 'UNKNOWN GOAL' task placeholder")
    data = {
        "pddl_domain": domain,
        "grammar": grammar.replace("UNKNOWN GOAL", world.goal_text),
        "pddl_problem": problem_text(world),
        "solvable": True,
        "walkthrough": list(walkthrough or []),
    }
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, json.dumps(data))
    return path


