"""The static description of one ALFWorld game: entities, initial facts, goal.

A ``World`` is what a ``game.tw-pddl`` file holds (or what the generator builds):
receptacles and objects identified by ALFRED's mangled ids
(``Mug_bar__plus_01_dot_00_bar_...``, lower-cased as the PDDL parser does), their
display names (``mug 1``), static properties, the initial dynamic facts and the goal.
Entities are kept sorted by id: TextWorld orders every listing by sorted facts, so
index order *is* display order.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple

from gigpo_gym.envs.alfworld import catalog

_KNOWN_TYPES = set(catalog.CAN_CONTAIN) | {t for v in catalog.CAN_CONTAIN.values() for t in v}
_KNOWN_TYPES |= catalog.TOGGLEABLE | catalog.RECEPTACLE_OBJECTS | {"Towel", "Pillow", "Plunger"}
_CAMEL = {t.lower(): t for t in _KNOWN_TYPES}

# Dynamic per-object flags (bits of ``State.flags``).
CLEAN, HOT, COOL, SLICED, TOGGLED, ON = 1, 2, 4, 8, 16, 32
FLAG_PREDICATES = {"isclean": CLEAN, "ishot": HOT, "iscool": COOL, "issliced": SLICED, "istoggled": TOGGLED, "ison": ON}
#: Static object properties (PDDL unary predicates).
OBJECT_PROPS = ("pickupable", "cleanable", "heatable", "coolable", "sliceable", "toggleable", "isreceptacleobject")


class Receptacle(NamedTuple):
    id: str
    name: str
    rtype: str | None  # ALFRED type, e.g. "CounterTop" (None: the file gives none)
    loc: int | None  # index into World.locations
    openable: bool


class Item(NamedTuple):
    id: str
    name: str
    otype: str | None
    props: frozenset[str]


@dataclass(frozen=True)
class InitialState:
    agent_loc: int
    obj_in: tuple[tuple[int, ...], ...]  # receptacles holding each object
    obj_loc: tuple[int, ...]  # objectAtLocation per object (-1: none)
    opened: frozenset[int]
    flags: tuple[int, ...]
    held: int = -1


@dataclass
class World:
    """One game: entities sorted by id, initial state, goal and its sentence."""

    locations: tuple[str, ...]
    receptacles: tuple[Receptacle, ...]
    objects: tuple[Item, ...]
    can_contain: frozenset[tuple[str, str]]  # (rtype, otype)
    init: InitialState
    goal: Any  # goal AST (see compile_goal)
    goal_text: str  # "put a clean mug in coffeemachine"
    task_type: str  # short name: pick, look, clean, heat, cool, pick2
    task_id: str
    gamefile: str
    put_template: str = "move {o} to {r}"
    #: ``inReceptacleObject`` facts (static: no action of the domain changes them).
    inner_objects: dict[int, tuple[int, ...]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.goal_check: Callable[[Any], bool] = compile_goal(self.goal, self)
        #: What the goal asks (types, count, treatment): for the expert.
        self.target: dict[str, Any] = goal_target(self.goal)


def mangle(alfred_id: str) -> str:
    """ALFRED object id -> the PDDL name ALFWorld writes (``Mug|+01.00`` -> ``Mug_bar__plus_01_dot_00``)."""
    for a, b in (("|", "_bar_"), ("+", "_plus_"), ("-", "_minus_"), (".", "_dot_"), (",", "_comma_")):
        alfred_id = alfred_id.replace(a, b)
    return alfred_id


def demangled_names(ids: list[str]) -> dict[str, str]:
    """Display names as ALFWorld's demangler gives them.

    The name is the part before the first ``_bar_`` (plus ``basin`` for sink and
    bathtub basins); instances of a name are numbered in sorted-id order from the
    highest number down (``cabinet 3, cabinet 2, cabinet 1`` when listed).
    """
    ids = sorted(ids)
    base: dict[str, str] = {}
    for i in ids:
        head, sep, _ = i.partition("_bar_")
        if sep:
            base[i] = head + ("basin" if "basin" in i else "")
    counts = Counter(base.values())
    names = {}
    for i in ids:
        if i in base:
            names[i] = f"{base[i]} {counts[base[i]]}"
            counts[base[i]] -= 1
        else:
            names[i] = i
    return names


# -- goals ------------------------------------------------------------------------
# AST: ("and", [..]) ("or", [..]) ("not", x) ("exists"|"forall", [(var, type)], body)
#      ("=", a, b) ("pred", name, [args]); args are "?var" or constants.
_STATIC_UNARY_OBJ = {"pickupable", "cleanable", "heatable", "coolable", "sliceable", "toggleable", "isreceptacleobject"}


def _type_key(t: str | None) -> str | None:
    return None if t is None else t.lower() + "type"


def compile_goal(goal: Any, world: World) -> Callable[[Any], bool]:
    """Turn a goal AST into ``check(state) -> bool`` with quantifier domains pre-filtered."""
    rec_index = {r.id: i for i, r in enumerate(world.receptacles)}
    obj_index = {o.id: i for i, o in enumerate(world.objects)}
    loc_index = {loc: i for i, loc in enumerate(world.locations)}
    recs, objs = world.receptacles, world.objects
    obj_tkey = [_type_key(o.otype) for o in objs]
    rec_tkey = [_type_key(r.rtype) for r in recs]
    otypes = sorted({k for k in obj_tkey if k})
    rtypes = sorted({k for k in rec_tkey if k})
    domains = {
        "object": list(range(len(world.objects))),
        "receptacle": list(range(len(world.receptacles))),
        "location": list(range(len(world.locations))),
        "agent": ["agent1"],
        "otype": otypes,
        "rtype": rtypes,
    }

    def const(name: str) -> Any:
        for table in (obj_index, rec_index, loc_index):
            if name in table:
                return table[name]
        return name

    def pred_fn(name: str, args: list[str]) -> Callable[[Any, dict], bool]:
        getters = [(lambda env, a=a: env[a]) if a.startswith("?") else (lambda env, c=const(a): c) for a in args]
        g = getters

        if name == "inreceptacle":
            return lambda s, env: g[1](env) in s.obj_in[g[0](env)]
        if name == "objecttype":
            return lambda s, env: obj_tkey[g[0](env)] == g[1](env)
        if name == "receptacletype":
            return lambda s, env: rec_tkey[g[0](env)] == g[1](env)
        if name in _STATIC_UNARY_OBJ:
            return lambda s, env: name in objs[g[0](env)].props
        if name in FLAG_PREDICATES:
            bit = FLAG_PREDICATES[name]
            return lambda s, env: bool(s.flags[g[0](env)] & bit)
        if name == "holds":
            return lambda s, env: s.held == g[1](env)
        if name == "holdsany":
            return lambda s, env: s.held >= 0
        if name == "atlocation":
            return lambda s, env: s.agent_loc == g[1](env)
        if name == "receptacleatlocation":
            return lambda s, env: recs[g[0](env)].loc == g[1](env)
        if name == "objectatlocation":
            return lambda s, env: s.obj_loc[g[0](env)] == g[1](env)
        if name == "opened":
            return lambda s, env: g[0](env) in s.opened
        if name == "openable":
            return lambda s, env: recs[g[0](env)].openable
        if name == "cancontain":
            can_keys = {(_type_key(a), _type_key(b)) for a, b in world.can_contain}
            return lambda s, env: (g[0](env), g[1](env)) in can_keys
        return lambda s, env: False  # predicates no goal of the six types uses

    by_tkey: dict[tuple[str, str | None], list[int]] = {}
    for i, k in enumerate(obj_tkey):
        by_tkey.setdefault(("object", k), []).append(i)
    for i, k in enumerate(rec_tkey):
        by_tkey.setdefault(("receptacle", k), []).append(i)

    def static_test(node: Any, var: str) -> Callable[[Any], bool] | None:
        """A test of ``var``'s value if ``node`` is a static fact about ``var`` alone."""
        if node[0] != "pred":
            return None
        name, args = node[1], node[2]
        if var not in args or any(a.startswith("?") and a != var for a in args):
            return None
        if name == "objecttype" and args[0] == var:
            t = args[1]
            return lambda v: obj_tkey[v] == t
        if name == "receptacletype" and args[0] == var:
            t = args[1]
            return lambda v: rec_tkey[v] == t
        if name in _STATIC_UNARY_OBJ:
            return lambda v: name in objs[v].props
        if name == "openable":
            return lambda v: recs[v].openable
        return None

    def free_vars(node: Any) -> set[str]:
        if node[0] == "pred":
            return {a for a in node[2] if a.startswith("?")}
        if node[0] == "=":
            return {a for a in node[1:] if a.startswith("?")}
        if node[0] == "not":
            return free_vars(node[1])
        if node[0] in ("and", "or"):
            return set().union(*(free_vars(n) for n in node[1])) if node[1] else set()
        return free_vars(node[2]) - {v for v, _ in node[1]}

    def comp_exists(node: Any) -> Callable[[Any, dict], bool]:
        """Nested ``exists`` flattened; static unary conjuncts filter the domains at
        compile time and every other conjunct is checked as soon as its variables
        are bound (a small join), so a goal check costs a few lookups."""
        variables: list[tuple[str, str]] = []
        while node[0] == "exists":
            variables += node[1]
            node = node[2]
        conjuncts, stack = [], [node]
        while stack:
            n = stack.pop(0)
            if n[0] == "and":
                stack = list(n[1]) + stack
            else:
                conjuncts.append(n)
        names = [v for v, _ in variables]
        doms, rest = [], list(conjuncts)
        for var, vtype in variables:
            tests = [(c, static_test(c, var)) for c in rest] if vtype in ("object", "receptacle") else []
            tests = [(c, t) for c, t in tests if t is not None]
            typed = [c for c, _ in tests if c[1] in ("objecttype", "receptacletype")]
            dom = by_tkey.get((vtype, typed[0][2][1]), []) if typed else domains.get(vtype, [])
            dom = [v for v in dom if all(t(v) for _, t in tests)]
            rest = [c for c in rest if not any(c is x for x, _ in tests)]
            doms.append((var, dom))
        checks: list[list[Callable]] = [[] for _ in range(len(names) + 1)]
        for c in rest:
            depth = max((names.index(v) + 1 for v in free_vars(c) if v in names), default=0)
            checks[depth].append(comp(c))
        n_vars = len(doms)

        def search(s: Any, env: dict, k: int) -> bool:
            var, dom = doms[k]
            here = checks[k + 1]
            last = k + 1 == n_vars
            for v in dom:
                env[var] = v
                if all(c(s, env) for c in here) and (last or search(s, env, k + 1)):
                    return True
            return False

        def check(s: Any, env: dict) -> bool:
            if not all(c(s, env) for c in checks[0]):
                return False
            return search(s, dict(env), 0) if n_vars else True

        return check

    def comp(node: Any) -> Callable[[Any, dict], bool]:
        op = node[0]
        if op == "and":
            parts = [comp(n) for n in node[1]]
            return lambda s, env: all(p(s, env) for p in parts)
        if op == "or":
            parts = [comp(n) for n in node[1]]
            return lambda s, env: any(p(s, env) for p in parts)
        if op == "not":
            inner = comp(node[1])
            return lambda s, env: not inner(s, env)
        if op == "=":
            a, b = node[1], node[2]
            ga = (lambda env: env[a]) if a.startswith("?") else (lambda env: const(a))
            gb = (lambda env: env[b]) if b.startswith("?") else (lambda env: const(b))
            return lambda s, env: ga(env) == gb(env)
        if op == "pred":
            return pred_fn(node[1], node[2])
        if op == "exists":
            return comp_exists(node)
        if op == "forall":
            variables, body = node[1], node[2]
            inner = comp(body)

            def forall(s: Any, env: dict, k: int = 0) -> bool:
                if k == len(variables):
                    return inner(s, env)
                var, vtype = variables[k]
                for v in domains.get(vtype, []):
                    env[var] = v
                    if not forall(s, env, k + 1):
                        return False
                return True

            return lambda s, env: forall(s, dict(env))
        raise ValueError(f"unsupported goal operator {op!r}")

    check = comp(goal)
    return lambda state: check(state, {})


def camel_type(type_const: str) -> str:
    base = type_const[:-4] if type_const.endswith("type") else type_const
    return _CAMEL.get(base, base)


def goal_target(goal: Any) -> dict[str, Any]:
    """What the goal asks, for task typing and the expert: types, count, treatment."""
    preds: list[tuple] = []

    def walk(n: Any) -> None:
        if n[0] == "pred":
            preds.append((n[1], n[2]))
        elif n[0] in ("and", "or"):
            for c in n[1]:
                walk(c)
        elif n[0] == "not":
            walk(n[1])
        elif n[0] in ("exists", "forall"):
            walk(n[2])
        elif n[0] == "=":
            preds.append(("=", [n[1], n[2]]))

    walk(goal)
    names = {p for p, _ in preds}
    toggle_vars = {a[0] for p, a in preds if p == "istoggled"}
    target: dict[str, Any] = {"otype": None, "rtype": None, "toggle": None, "count": 1, "treat": None}
    for p, args in preds:
        if p == "objecttype":
            key = "toggle" if args[0] in toggle_vars else "otype"
            target[key] = target[key] or camel_type(args[1])
        elif p == "receptacletype":
            target["rtype"] = target["rtype"] or camel_type(args[1])
    if "=" in names:
        target["count"] = 2
    for treat, pred in (("clean", "isclean"), ("heat", "ishot"), ("cool", "iscool")):
        if pred in names:
            target["treat"] = treat
    if "istoggled" in names:
        target["task_type"] = "look"
    elif target["treat"]:
        target["task_type"] = target["treat"]
    else:
        target["task_type"] = "pick2" if target["count"] == 2 else "pick"
    return target
