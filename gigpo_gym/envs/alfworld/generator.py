"""Households and tasks generated offline, lazily, deterministically per seed.

A *layout* (one per scene number, as ALFRED's floor plans: kitchens 1-30, living
rooms 201-230, bedrooms 301-330, bathrooms 401-430) fixes the receptacles, their
locations and the lamps.  A *task* (one per split index) draws a task type, a
scene, the object instances and where they lie, and the goal.  ``valid_seen`` uses
the training scenes with new tasks; ``valid_unseen`` uses held-out scenes (the
four ALFWorld holds out: 10, 219, 308, 424).  Task ``i`` of a split is built from
``derive_seed(seed, split, i)`` alone, so any task is available in O(1).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import lru_cache

from gigpo_gym.core.env import derive_seed
from gigpo_gym.envs.alfworld import catalog
from gigpo_gym.envs.alfworld.pddl import goal_ast, parse_sexpr
from gigpo_gym.envs.alfworld.world import InitialState, Item, Receptacle, World, demangled_names, mangle

GENERATOR_VERSION = 1
SPLIT_SIZES = {"train": 3553, "valid_seen": 140, "valid_unseen": 134}
SPLIT_ALIASES = {"eval_in_distribution": "valid_seen", "eval_out_of_distribution": "valid_unseen"}
_SPLIT_CODE = {"train": 1, "valid_seen": 2, "valid_unseen": 3}
HELD_OUT_SCENES = (10, 219, 308, 424)
_ROOM_BASE = {"Kitchen": 0, "LivingRoom": 200, "Bedroom": 300, "Bathroom": 400}
ALL_SCENES = tuple(base + n for base in _ROOM_BASE.values() for n in range(1, 31))

#: (receptacle type, min count, max count) per room kind.
ROOM_RECEPTACLES: dict[str, tuple[tuple[str, int, int], ...]] = {
    "Kitchen": (
        ("Cabinet", 3, 12), ("CounterTop", 1, 3), ("Drawer", 1, 8), ("Fridge", 1, 1), ("Microwave", 1, 1),
        ("SinkBasin", 1, 2), ("StoveBurner", 2, 4), ("CoffeeMachine", 1, 1), ("GarbageCan", 1, 1),
        ("Toaster", 1, 1), ("DiningTable", 0, 2), ("Shelf", 0, 3), ("SideTable", 0, 1),
    ),
    "LivingRoom": (
        ("ArmChair", 0, 2), ("Sofa", 1, 1), ("CoffeeTable", 1, 2), ("SideTable", 1, 3), ("Drawer", 0, 4),
        ("Cabinet", 0, 4), ("Shelf", 0, 6), ("TVStand", 0, 1), ("GarbageCan", 1, 1), ("DiningTable", 0, 1),
        ("Dresser", 0, 1), ("Ottoman", 0, 1),
    ),
    "Bedroom": (
        ("Bed", 1, 1), ("Desk", 0, 2), ("Drawer", 2, 8), ("Dresser", 0, 1), ("GarbageCan", 1, 1),
        ("LaundryHamper", 0, 1), ("Shelf", 1, 6), ("SideTable", 1, 2), ("Safe", 0, 1), ("ArmChair", 0, 1),
    ),
    "Bathroom": (
        ("Cabinet", 1, 4), ("CounterTop", 1, 1), ("Drawer", 0, 4), ("GarbageCan", 1, 1), ("HandTowelHolder", 1, 2),
        ("SinkBasin", 1, 2), ("Toilet", 1, 1), ("ToiletPaperHanger", 1, 1), ("TowelHolder", 1, 1), ("Shelf", 0, 3),
        ("BathtubBasin", 0, 1), ("Dresser", 0, 1),
    ),
}
ROOM_OBJECTS: dict[str, tuple[str, ...]] = {
    "Kitchen": tuple(
        "Apple Bowl Bread ButterKnife Cup DishSponge Egg Fork Glassbottle Kettle Knife Ladle Lettuce Mug Pan "
        "PepperShaker Plate Pot Potato SaltShaker SoapBottle Spatula Spoon Tomato WineBottle".split()
    ),
    "LivingRoom": tuple(
        "Book Bowl Box CellPhone CreditCard KeyChain Laptop Newspaper Pillow RemoteControl Statue Vase WateringCan "
        "TissueBox Watch Plate".split()
    ),
    "Bedroom": tuple(
        "AlarmClock BaseballBat BasketBall Book Bowl CD CellPhone Cloth CreditCard KeyChain Laptop Mug Pen Pencil "
        "Pillow TennisRacket Watch".split()
    ),
    "Bathroom": tuple(
        "Candle Cloth DishSponge HandTowel Plunger SoapBar SoapBottle SprayBottle TissueBox ToiletPaper Towel".split()
    ),
}
LAMP_HOLDERS = ("Desk", "SideTable", "Dresser")
#: Types the problem files declare for receptacles the CAN_CONTAIN table lacks.
_EXTRA_CAN = {("Cabinet", "Plunger"), ("Toilet", "Plunger"), ("TowelHolder", "Towel")}


def room_kind(scene: int) -> str:
    return {0: "Kitchen", 2: "LivingRoom", 3: "Bedroom", 4: "Bathroom"}[scene // 100]


def canonical_split(split: str) -> str:
    split = SPLIT_ALIASES.get(split, split)
    if split not in SPLIT_SIZES:
        import difflib

        names = list(SPLIT_SIZES) + list(SPLIT_ALIASES)
        close = difflib.get_close_matches(split, names, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ValueError(f"unknown split {split!r}; expected one of {names}.{hint}")
    return split


def split_scenes(split: str) -> tuple[int, ...]:
    if split == "valid_unseen":
        return HELD_OUT_SCENES
    return tuple(s for s in ALL_SCENES if s not in HELD_OUT_SCENES)


#: ALFRED-style coordinates (-4.00 .. +4.00) already mangled: "_plus_01_dot_23".
_COORDS = tuple(mangle(f"|{(i - 400) / 100:+06.2f}").lower() for i in range(801))


def _unique_id(rng: random.Random, kind: str, used: set[str], suffix: str = "") -> str:
    """A fresh mangled, lower-cased ALFRED id such as ``mug_bar__plus_01_dot_23_bar_...``."""
    head = ("Sink" if kind == "SinkBasin" else "Bathtub" if kind == "BathtubBasin" else kind).lower()
    tail = mangle(suffix).lower()
    while True:
        ident = head + _COORDS[rng.randrange(801)] + _COORDS[rng.randrange(801)] + _COORDS[rng.randrange(801)] + tail
        if ident not in used:
            used.add(ident)
            return ident


@dataclass(frozen=True)
class Layout:
    scene: int
    kind: str
    receptacles: tuple[tuple[str, str], ...]  # (id, type), any order
    locations: tuple[str, ...]  # locations[i] belongs to receptacles[i]; last = agent start
    lamps: tuple[tuple[str, str, int], ...]  # (id, type, receptacle index)


@lru_cache(maxsize=256)
def layout(seed: int, scene: int) -> Layout:
    """The receptacles, locations and lamps of one scene (cached: scenes repeat)."""
    rng = random.Random(derive_seed(seed, 7, scene))
    kind = room_kind(scene)
    used: set[str] = set()
    recs = []
    for rtype, lo, hi in ROOM_RECEPTACLES[kind]:
        for _ in range(rng.randint(lo, hi)):
            suffix = "|SinkBasin" if rtype == "SinkBasin" else "|BathtubBasin" if rtype == "BathtubBasin" else ""
            recs.append((_unique_id(rng, rtype, used, suffix), rtype))
    locs: list[str] = []
    seen_locs: set[str] = set()
    while len(locs) < len(recs) + 1:
        loc = mangle(f"loc|{rng.randint(-12, 12)}|{rng.randint(-12, 12)}|{rng.choice((0, 90, 180, 270))}|30").lower()
        if loc not in seen_locs:
            seen_locs.add(loc)
            locs.append(loc)
    lamps = []
    if kind in ("LivingRoom", "Bedroom"):
        holders = [i for i, (_, t) in enumerate(recs) if t in LAMP_HOLDERS]
        for lamp in rng.sample(("DeskLamp", "FloorLamp"), rng.randint(1, 2)):
            lamps.append((_unique_id(rng, lamp, used), lamp, rng.choice(holders)))
    return Layout(scene, kind, tuple(recs), tuple(locs), tuple(lamps))


_PLACE_GOAL = """(exists (?r - receptacle) (exists (?o - object) (and {extra}
    (objectType ?o {obj}Type) (receptacleType ?r {recep}Type) (inReceptacle ?o ?r))))"""
_GOALS = {
    "pick": _PLACE_GOAL.format(extra="", obj="{obj}", recep="{recep}"),
    "clean": _PLACE_GOAL.format(extra="(cleanable ?o) (isClean ?o)", obj="{obj}", recep="{recep}"),
    "heat": _PLACE_GOAL.format(extra="(heatable ?o) (isHot ?o)", obj="{obj}", recep="{recep}"),
    "cool": _PLACE_GOAL.format(extra="(coolable ?o) (isCool ?o)", obj="{obj}", recep="{recep}"),
    "pick2": """(exists (?r - receptacle) (exists (?o - object) (and
        (objectType ?o {obj}Type) (receptacleType ?r {recep}Type) (inReceptacle ?o ?r)
        (exists (?o2 - object) (and (not (= ?o ?o2)) (objectType ?o2 {obj}Type)
            (receptacleType ?r {recep}Type) (inReceptacle ?o2 ?r))))))""",
    "look": """(and
        (exists (?ot - object ?r - receptacle ?a - agent ?l - location) (and
            (objectType ?ot {toggle}Type) (toggleable ?ot) (isToggled ?ot)
            (receptacleAtLocation ?r ?l) (atLocation ?a ?l) (inReceptacle ?ot ?r)))
        (exists (?o - object ?a - agent) (and (objectType ?o {obj}Type) (holds ?a ?o))))""",
}


@lru_cache(maxsize=4096)
def goal_for(task_type: str, otype: str, rtype: str | None, toggle: str | None) -> tuple:
    """The goal of ALFWorld's goal library for one task type, as an AST."""
    text = _GOALS[task_type].format(obj=otype, recep=rtype, toggle=toggle)
    return goal_ast(parse_sexpr(text)[0])


@lru_cache(maxsize=None)
def _props(otype: str) -> frozenset[str]:
    props = {"pickupable"} if otype not in catalog.TOGGLEABLE else set()
    for name, table in (("cleanable", catalog.CLEANABLE), ("heatable", catalog.HEATABLE),
                        ("coolable", catalog.COOLABLE), ("sliceable", catalog.SLICEABLE),
                        ("toggleable", catalog.TOGGLEABLE), ("isreceptacleobject", catalog.RECEPTACLE_OBJECTS)):
        if otype in table:
            props.add(name)
    return frozenset(props)


def _can(rtype: str, otype: str) -> bool:
    return otype in catalog.CAN_CONTAIN.get(rtype, ()) or (rtype, otype) in _EXTRA_CAN


@lru_cache(maxsize=1024)
def _can_pairs(rtypes: tuple[str, ...], otypes: tuple[str, ...]) -> frozenset[tuple[str, str]]:
    return frozenset((r, o) for r in rtypes for o in otypes if _can(r, o))


@lru_cache(maxsize=4096)
def _spots(lay: Layout, otype: str) -> tuple[int, ...]:
    """Indices of the layout's receptacles that can hold ``otype``."""
    return tuple(i for i, (_, t) in enumerate(lay.receptacles) if _can(t, otype))


def generate_task(seed: int, split: str, index: int, task_types: tuple[str, ...] = tuple(catalog.TASK_TYPES)) -> World:
    """Task ``index`` of ``split``: always solvable, goal not already met."""
    split = canonical_split(split)
    rng = random.Random(derive_seed(seed, _SPLIT_CODE[split], index, GENERATOR_VERSION))
    for _attempt in range(100):
        world = _try_task(rng, seed, split, index, task_types)
        if world is not None:
            return world
    raise RuntimeError(f"could not generate task {index} of split {split!r} (seed {seed}, types {task_types})")


def _try_task(rng: random.Random, seed: int, split: str, index: int, task_types: tuple[str, ...]) -> World | None:
    ttype = rng.choice(task_types)
    scenes = [s for s in split_scenes(split) if room_kind(s) in catalog.TASK_ROOMS[ttype]]
    lay = layout(seed, rng.choice(scenes))
    rtypes = sorted({t for _, t in lay.receptacles})
    treat_rtype = catalog.TREATMENT_RECEPTACLE.get(ttype)
    if treat_rtype and treat_rtype not in rtypes:
        return None
    pool = [o for o in ROOM_OBJECTS[lay.kind] if ttype not in catalog.TREATABLE or o in catalog.TREATABLE[ttype]]
    otype = rng.choice(pool)
    holders = [t for t in rtypes if _can(t, otype)]
    rtype = toggle = None
    if ttype == "look":
        if not lay.lamps or not holders:
            return None
        toggle = rng.choice(sorted({t for _, t, _ in lay.lamps}))
    else:
        targets = [t for t in holders if t != treat_rtype]
        if not targets:
            return None
        rtype = rng.choice(targets)
    sources = [i for i in _spots(lay, otype) if lay.receptacles[i][1] != rtype]
    if not sources:
        return None

    used = {rid for rid, _ in lay.receptacles} | {lid for lid, _, _ in lay.lamps}
    placed: list[tuple[str, str, int]] = list(lay.lamps)  # (id, type, receptacle index)
    n_target = rng.randint(2, 3) if ttype == "pick2" else rng.randint(1, 3)
    for _ in range(n_target):
        placed.append((_unique_id(rng, otype, used), otype, rng.choice(sources)))
    for other in ROOM_OBJECTS[lay.kind]:
        if other == otype or rng.random() < 0.35:
            continue
        spots = _spots(lay, other)
        for _ in range(rng.randint(1, 3) if spots else 0):
            placed.append((_unique_id(rng, other, used), other, rng.choice(spots)))

    template = rng.choice(catalog.GOAL_TEMPLATES[ttype])
    goal_text = template.format(obj=otype.lower(), recep=(rtype or "").lower(), toggle=(toggle or "").lower())
    full = catalog.TASK_TYPES[ttype]
    task_id = f"{split}/{full}-{otype}-None-{rtype or toggle}-{lay.scene}/trial_{index:05d}"
    return _assemble(lay, placed, goal_for(ttype, otype, rtype, toggle), goal_text, ttype, task_id, seed)


def _assemble(lay: Layout, placed: list[tuple[str, str, int]], goal: tuple, goal_text: str, ttype: str,
              task_id: str, seed: int) -> World:
    names = demangled_names([rid for rid, _ in lay.receptacles] + [oid for oid, _, _ in placed])
    rec_order = sorted(range(len(lay.receptacles)), key=lambda i: lay.receptacles[i][0])
    rec_pos = {old: new for new, old in enumerate(rec_order)}
    locs = sorted(lay.locations)
    loc_pos = {loc: i for i, loc in enumerate(locs)}
    receptacles = tuple(
        Receptacle(lay.receptacles[i][0], names[lay.receptacles[i][0]], lay.receptacles[i][1],
                   loc_pos[lay.locations[i]], lay.receptacles[i][1] in catalog.OPENABLE)
        for i in rec_order
    )
    placed = sorted(placed)
    objects = tuple(Item(oid, names[oid], otype, _props(otype)) for oid, otype, _ in placed)
    can = _can_pairs(tuple(sorted({r.rtype for r in receptacles})), tuple(sorted({o.otype for o in objects})))
    init = InitialState(
        agent_loc=loc_pos[lay.locations[-1]],
        obj_in=tuple((rec_pos[r],) for _, _, r in placed),
        obj_loc=tuple(receptacles[rec_pos[r]].loc for _, _, r in placed),
        opened=frozenset(),
        flags=tuple(0 for _ in placed),
    )
    return World(
        locations=tuple(locs), receptacles=receptacles, objects=objects, can_contain=can, init=init, goal=goal,
        goal_text=goal_text, task_type=ttype, task_id=task_id,
        gamefile=f"generated:seed{seed}/{task_id}",
    )
