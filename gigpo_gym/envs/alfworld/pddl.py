"""Read ALFWorld ``game.tw-pddl`` files into a ``World`` (and write one back).

A game file is JSON with ``pddl_domain``, ``grammar``, ``pddl_problem``,
``solvable`` and ``walkthrough``.  The engine implements the ALFRED domain itself,
so only the problem (objects, initial facts, goal), the goal sentence of the
grammar's ``task`` rule and the put-command template are read.  Names are
lower-cased, as the PDDL parser does.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from gigpo_gym.envs.alfworld.world import (
    FLAG_PREDICATES,
    OBJECT_PROPS,
    InitialState,
    Item,
    Receptacle,
    World,
    camel_type,
    demangled_names,
    goal_target,
)

_TOKEN = re.compile(r"\(|\)|[^\s(),]+")


class GameFileError(ValueError):
    """A game file that cannot be read; the message names the file and the field."""


def parse_sexpr(text: str) -> list:
    """Parse PDDL text into nested lists of lower-case atoms (``;`` comments dropped)."""
    text = re.sub(r";[^\n]*", "", text)
    stack: list[list] = [[]]
    for tok in _TOKEN.findall(text):
        if tok == "(":
            stack.append([])
        elif tok == ")":
            if len(stack) == 1:
                raise ValueError("unbalanced ')'")
            done = stack.pop()
            stack[-1].append(done)
        else:
            stack[-1].append(tok.lower())
    if len(stack) != 1:
        raise ValueError("unbalanced '('")
    return stack[0]


def _typed(items: list) -> list[tuple[str, str]]:
    """``a b - t c - u`` -> [(a, t), (b, t), (c, u)]."""
    out, pending, i = [], [], 0
    while i < len(items):
        tok = items[i]
        if tok == "-" and i + 1 < len(items):
            out += [(p, items[i + 1]) for p in pending]
            pending, i = [], i + 2
        else:
            pending.append(tok)
            i += 1
    return out + [(p, "object") for p in pending]


def goal_ast(node: Any) -> Any:
    """PDDL goal s-expression -> the AST ``world.compile_goal`` takes."""
    if not isinstance(node, list) or not node:
        raise ValueError(f"bad goal expression {node!r}")
    head = node[0]
    if head in ("and", "or"):
        return (head, [goal_ast(n) for n in node[1:]])
    if head == "not":
        return ("not", goal_ast(node[1]))
    if head in ("exists", "forall"):
        return (head, _typed(node[1]), goal_ast(node[2]))
    if head == "=":
        return ("=", node[1], node[2])
    return ("pred", head, list(node[1:]))


def world_from_problem(
    problem: str, goal_text: str, *, task_id: str, gamefile: str, put_template: str = "move {o} to {r}",
    task_type: str | None = None,
) -> World:
    """Build a ``World`` from PDDL problem text."""
    tree = parse_sexpr(problem)
    if not tree or not isinstance(tree[0], list) or tree[0][:1] != ["define"]:
        raise ValueError("pddl_problem is not a '(define (problem ...) ...)' form")
    sections = {part[0]: part[1:] for part in tree[0][1:] if isinstance(part, list) and part}
    for key in (":objects", ":init", ":goal"):
        if key not in sections:
            raise ValueError(f"pddl_problem lacks the {key} section")
    kinds = dict(_typed(sections[":objects"]))
    facts = [f for f in sections[":init"] if isinstance(f, list) and f and f[0] != "="]
    entity_ids = sorted({a for f in facts for a in f[1:]})
    names = demangled_names(entity_ids)

    by_kind: dict[str, list[str]] = {"receptacle": [], "object": [], "location": []}
    for ent in entity_ids:
        kind = kinds.get(ent)
        if kind in by_kind:
            by_kind[kind].append(ent)
    locs = sorted(by_kind["location"])
    rec_ids, obj_ids = sorted(by_kind["receptacle"]), sorted(by_kind["object"])
    li = {x: i for i, x in enumerate(locs)}
    ri = {x: i for i, x in enumerate(rec_ids)}
    oi = {x: i for i, x in enumerate(obj_ids)}

    rtype: dict[str, str] = {}
    otype: dict[str, str] = {}
    rloc: dict[str, int] = {}
    openable: set[str] = set()
    props: dict[str, set[str]] = {o: set() for o in obj_ids}
    flags = [0] * len(obj_ids)
    obj_in: list[list[int]] = [[] for _ in obj_ids]
    obj_loc = [-1] * len(obj_ids)
    opened: set[int] = set()
    can: set[tuple[str, str]] = set()
    inner: dict[int, list[int]] = {}
    agent_loc, held = None, -1
    for f in facts:
        p, args = f[0], f[1:]
        try:
            if p == "receptacletype":
                rtype[args[0]] = camel_type(args[1])
            elif p == "objecttype":
                otype[args[0]] = camel_type(args[1])
            elif p == "receptacleatlocation" and args[0] in ri:
                rloc[args[0]] = li[args[1]]
            elif p == "openable":
                openable.add(args[0])
            elif p == "opened" and args[0] in ri:
                opened.add(ri[args[0]])
            elif p in OBJECT_PROPS and args[0] in oi:
                props[args[0]].add(p)
            elif p in FLAG_PREDICATES and args[0] in oi:
                flags[oi[args[0]]] |= FLAG_PREDICATES[p]
            elif p == "inreceptacle" and args[0] in oi and args[1] in ri:
                obj_in[oi[args[0]]].append(ri[args[1]])
            elif p == "objectatlocation" and args[0] in oi:
                obj_loc[oi[args[0]]] = li[args[1]]
            elif p == "atlocation":
                agent_loc = li[args[1]]
            elif p == "holds" and args[1] in oi:
                held = oi[args[1]]
            elif p == "cancontain":
                can.add((camel_type(args[0]), camel_type(args[1])))
            elif p == "inreceptacleobject" and args[0] in oi and args[1] in oi:
                inner.setdefault(oi[args[1]], []).append(oi[args[0]])
        except (IndexError, KeyError) as e:
            raise ValueError(f"pddl_problem fact ({' '.join(f)}) names an unknown entity {e}") from e
    if agent_loc is None:
        raise ValueError("pddl_problem has no (atLocation agent ?l) fact")
    goal = goal_ast(sections[":goal"][0])
    return World(
        locations=tuple(locs),
        receptacles=tuple(
            Receptacle(r, names[r], rtype.get(r), rloc.get(r), r in openable) for r in rec_ids
        ),
        objects=tuple(Item(o, names[o], otype.get(o), frozenset(props[o])) for o in obj_ids),
        can_contain=frozenset(can),
        init=InitialState(
            agent_loc=agent_loc,
            obj_in=tuple(tuple(sorted(x)) for x in obj_in),
            obj_loc=tuple(obj_loc),
            opened=frozenset(opened),
            flags=tuple(flags),
            held=held,
        ),
        goal=goal,
        goal_text=goal_text,
        task_type=task_type or goal_target(goal)["task_type"],
        task_id=task_id,
        gamefile=gamefile,
        put_template=put_template,
        inner_objects={k: tuple(sorted(v)) for k, v in inner.items()},
    )


def grammar_goal_text(grammar: str) -> str:
    """The goal sentence of the grammar's ``task`` rule ("Your task is to: ...")."""
    m = re.search(r'"task"\s*:\s*\[\s*\{\s*"rhs"\s*:\s*"Your task is to: (.*?)\.?"\s*\}', grammar, re.S)
    if not m:
        raise ValueError("grammar has no \"task\" rule of the form \"Your task is to: ...\"")
    if m.group(1) == "UNKNOWN GOAL":
        raise ValueError("grammar's task rule still says 'UNKNOWN GOAL' (the game was never given a goal)")
    return m.group(1)


def grammar_put_template(grammar: str) -> str:
    """``move {o} to {r}`` (0.4.x) or ``put {o} in/on {r}`` (older game files)."""
    m = re.search(r'action\s+PutObject\s*\{\s*template\s*::\s*"([^"]*)"', grammar)
    return m.group(1) if m else "move {o} to {r}"


def load_game_file(path: str | Path, *, task_id: str | None = None, task_type: str | None = None) -> World:
    """Read one ``game.tw-pddl`` file; errors name the file and the field."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise GameFileError(f"{path}: not a readable JSON game file ({e})") from e
    if not isinstance(data, dict):
        raise GameFileError(f"{path}: expected a JSON object with pddl_problem and grammar")
    for key in ("pddl_problem", "grammar"):
        if not isinstance(data.get(key), str):
            raise GameFileError(f"{path}: field {key!r} is missing or not a string")
    try:
        goal_text = grammar_goal_text(data["grammar"])
    except ValueError as e:
        raise GameFileError(f"{path}: field 'grammar': {e}") from e
    try:
        return world_from_problem(
            data["pddl_problem"],
            goal_text,
            task_id=task_id or str(path.parent),
            gamefile=str(path),
            put_template=grammar_put_template(data["grammar"]),
            task_type=task_type,
        )
    except ValueError as e:
        raise GameFileError(f"{path}: field 'pddl_problem': {e}") from e
