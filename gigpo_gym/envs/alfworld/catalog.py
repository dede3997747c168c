"""ALFRED's receptacle and object types and the rules ALFWorld's PDDL problems use.

Facts restated from ALFRED/ALFWorld (``alfworld/gen/constants.py``): which receptacle
type can hold which object type (``canContain``), which objects can be cleaned,
heated, cooled, sliced or switched on, which receptacles open, and which object
types are movable receptacles (``isReceptacleObject``).  Sliced variants and the
movable-receptacle task are left out, as the reference env skips those games.
"""

from __future__ import annotations

#: Short task-type names (the paper's table) -> ALFWorld's ``task_type``.
TASK_TYPES: dict[str, str] = {
    "pick": "pick_and_place_simple",
    "look": "look_at_obj_in_light",
    "clean": "pick_clean_then_place_in_recep",
    "heat": "pick_heat_then_place_in_recep",
    "cool": "pick_cool_then_place_in_recep",
    "pick2": "pick_two_obj_and_place",
}
SHORT_TASK_TYPE: dict[str, str] = {full: short for short, full in TASK_TYPES.items()}

#: Goal sentence templates per task type (ALFWorld's goal library, two per type).
GOAL_TEMPLATES: dict[str, tuple[str, str]] = {
    "pick": ("put a {obj} in {recep}", "put some {obj} on {recep}"),
    "look": ("look at {obj} under the {toggle}", "examine the {obj} with the {toggle}"),
    "clean": ("put a clean {obj} in {recep}", "clean some {obj} and put it in {recep}"),
    "heat": ("put a hot {obj} in {recep}", "heat some {obj} and put it in {recep}"),
    "cool": ("put a cool {obj} in {recep}", "cool some {obj} and put it in {recep}"),
    "pick2": ("put two {obj} in {recep}", "find two {obj} and put them in {recep}"),
}

#: Room kinds where each task type is generated (ALFRED's ``GOALS_VALID``).
TASK_ROOMS: dict[str, tuple[str, ...]] = {
    "pick": ("Kitchen", "LivingRoom", "Bedroom", "Bathroom"),
    "look": ("LivingRoom", "Bedroom"),
    "clean": ("Kitchen", "Bathroom"),
    "heat": ("Kitchen",),
    "cool": ("Kitchen",),
    "pick2": ("Kitchen", "LivingRoom", "Bedroom", "Bathroom"),
}

_TABLE = (
    "AlarmClock Apple BaseballBat BasketBall Book Bowl Box Bread ButterKnife CD Candle CellPhone Cloth "
    "CreditCard Cup DishSponge Egg Fork Glassbottle HandTowel Kettle KeyChain Knife Ladle Laptop Lettuce Mug "
    "Newspaper Pan PaperTowel Pen Pencil PepperShaker Plate Pot Potato RemoteControl SaltShaker SoapBar "
    "SoapBottle Spatula Spoon SprayBottle Statue TennisRacket TissueBox ToiletPaper ToiletPaperRoll Tomato Vase "
    "Watch WateringCan WineBottle"
)

#: What each (static) receptacle type can hold.
CAN_CONTAIN: dict[str, frozenset[str]] = {
    k: frozenset(v.split())
    for k, v in {
        "ArmChair": "BasketBall Book Box CellPhone Cloth CreditCard KeyChain Laptop Newspaper Pillow RemoteControl",
        "BathtubBasin": "Cloth DishSponge HandTowel SoapBar",
        "Bed": "BaseballBat BasketBall Book CellPhone Laptop Newspaper Pillow TennisRacket",
        "Cabinet": "Book Bowl Box CD Candle Cloth Cup DishSponge Glassbottle HandTowel Kettle Ladle Mug Newspaper "
        "Pan PepperShaker Plate Plunger Pot SaltShaker SoapBar SoapBottle SprayBottle TissueBox ToiletPaper "
        "ToiletPaperRoll Vase WateringCan WineBottle",
        "Cart": "Candle Cloth DishSponge HandTowel Mug PaperTowel Plunger SoapBar SoapBottle SprayBottle Statue "
        "TissueBox ToiletPaper ToiletPaperRoll Vase",
        "CoffeeMachine": "Mug",
        "CoffeeTable": _TABLE,
        "CounterTop": _TABLE,
        "Desk": "AlarmClock BasketBall Book Bowl Box CD Candle CellPhone Cloth CreditCard Cup Glassbottle KeyChain "
        "Laptop Mug Newspaper Pen Pencil Plate RemoteControl SoapBottle SprayBottle Statue TennisRacket TissueBox "
        "ToiletPaper ToiletPaperRoll Vase Watch WateringCan WineBottle",
        "DiningTable": _TABLE,
        "Drawer": "Book ButterKnife CD Candle CellPhone Cloth CreditCard DishSponge Fork HandTowel KeyChain Knife "
        "Ladle Newspaper Pen Pencil PepperShaker RemoteControl SaltShaker SoapBar SoapBottle Spatula Spoon "
        "SprayBottle TissueBox ToiletPaper ToiletPaperRoll Watch WateringCan",
        "Dresser": "AlarmClock BasketBall Book Bowl Box CD Candle CellPhone Cloth CreditCard Cup Glassbottle KeyChain "
        "Laptop Mug Newspaper Pen Pencil Plate RemoteControl SprayBottle Statue TennisRacket TissueBox ToiletPaper "
        "ToiletPaperRoll Vase Watch WateringCan WineBottle",
        "Fridge": "Apple Bowl Bread Cup Egg Glassbottle Lettuce Mug Pan Plate Pot Potato Tomato WineBottle",
        "GarbageCan": "Apple Bread CD Cloth DishSponge Egg HandTowel Lettuce Newspaper PaperTowel Pen Pencil Potato "
        "SoapBar SoapBottle SprayBottle TissueBox ToiletPaper ToiletPaperRoll Tomato WineBottle",
        "HandTowelHolder": "HandTowel",
        "LaundryHamper": "Cloth",
        "Microwave": "Apple Bowl Bread Cup Egg Glassbottle Mug Plate Potato Tomato",
        "Ottoman": "BasketBall Book Box CellPhone Cloth CreditCard KeyChain Laptop Newspaper Pillow RemoteControl",
        "Safe": "CD CellPhone CreditCard KeyChain Statue Vase Watch",
        "Shelf": "AlarmClock Book Bowl Box CD Candle CellPhone Cloth CreditCard Cup DishSponge Glassbottle HandTowel "
        "Kettle KeyChain Mug Newspaper PaperTowel Pen Pencil PepperShaker Plate Pot RemoteControl SaltShaker SoapBar "
        "SoapBottle SprayBottle Statue TissueBox ToiletPaper ToiletPaperRoll Vase Watch WateringCan WineBottle",
        "SideTable": _TABLE,
        "SinkBasin": "Apple Bowl ButterKnife Cloth Cup DishSponge Egg Fork Glassbottle HandTowel Kettle Knife Ladle "
        "Lettuce Mug Pan Plate Pot Potato SoapBar Spatula Spoon Tomato",
        "Sofa": "BasketBall Book Box CellPhone Cloth CreditCard KeyChain Laptop Newspaper Pillow RemoteControl",
        "StoveBurner": "Kettle Pan Pot",
        "TVStand": "TissueBox",
        "Toaster": "",
        "Toilet": "Candle Cloth DishSponge HandTowel Newspaper PaperTowel SoapBar SoapBottle SprayBottle TissueBox "
        "ToiletPaper ToiletPaperRoll",
        "ToiletPaperHanger": "ToiletPaper ToiletPaperRoll",
        "TowelHolder": "Towel",
    }.items()
}

OPENABLE: frozenset[str] = frozenset({"Fridge", "Cabinet", "Microwave", "Drawer", "Safe", "Box"})
HEATABLE = frozenset("Apple Bread Cup Egg Mug Plate Potato Tomato".split())
COOLABLE = frozenset("Apple Bowl Bread Cup Egg Lettuce Mug Pan Plate Pot Potato Tomato WineBottle".split())
CLEANABLE = frozenset(
    "Apple Bowl ButterKnife Cloth Cup DishSponge Egg Fork Kettle Knife Ladle Lettuce Mug Pan Plate Pot Potato "
    "SoapBar Spatula Spoon Tomato".split()
)
SLICEABLE = frozenset("Apple Bread Egg Lettuce Potato Tomato".split())
TOGGLEABLE = frozenset({"DeskLamp", "FloorLamp"})
KNIVES = frozenset({"Knife", "ButterKnife"})
#: Movable receptacles: ``isReceptacleObject`` in ALFWorld problems ("This is a normal mug 1. In it, ...").
RECEPTACLE_OBJECTS = frozenset({"Bowl", "Box", "Cup", "Mug", "Plate", "Pan", "Pot"})
#: The appliance each treatment needs (the PDDL domain's HeatObject/CleanObject/CoolObject).
TREATMENT_RECEPTACLE = {"clean": "SinkBasin", "heat": "Microwave", "cool": "Fridge"}
TREATABLE = {"clean": CLEANABLE, "heat": HEATABLE, "cool": COOLABLE}
