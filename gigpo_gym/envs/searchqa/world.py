"""A generated fictional world: people, places, organisations and works.

Fictional so that no model can answer from memory: the reward measures search.
Everything comes from one seeded stream that only uses ``random.Random.random()``
(whose output Python guarantees across versions), so the same seed gives the
same world on any machine.  ``world_text`` turns the world into passages and
questions.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field

_ONSETS = ("b", "d", "k", "l", "m", "n", "r", "s", "t", "v", "z", "th", "sh", "br", "dr", "kr", "tr", "gr", "st", "h")
_VOWELS = ("a", "e", "i", "o", "u", "ae", "ei", "ou", "ia", "y")
_CODAS = ("n", "r", "l", "s", "th", "k", "m", "", "", "nd", "sk", "v")

OCCUPATIONS = (
    "novelist", "poet", "composer", "painter", "film director",
    "chemist", "astronomer", "architect", "engineer", "physician", "mathematician",
)  # fmt: skip
#: occupation -> (kind of work, verb, noun for the maker)
WORK_KINDS = {
    "novelist": ("novel", "wrote", "author"),
    "poet": ("poetry collection", "wrote", "author"),
    "composer": ("symphony", "composed", "composer"),
    "painter": ("painting", "painted", "painter"),
    "film director": ("film", "directed", "director"),
}
ORG_KINDS = ("University", "Observatory", "Museum", "Orchestra", "Printing Company", "Shipyard", "Academy", "Bank")
_ADJECTIVES = (
    "Amber", "Silent", "Hollow", "Crimson", "Distant", "Iron", "Pale", "Winter", "Burning", "Glass",
    "Sleeping", "Broken", "Golden", "Quiet", "Northern", "Salt", "Velvet", "Last", "Wandering", "Hidden",
)  # fmt: skip
_NOUNS = (
    "Lattice", "Harbour", "Orchard", "Lantern", "Meridian", "Tide", "Cathedral", "Garden", "Compass",
    "Mirror", "Archive", "Lighthouse", "River", "Feather", "Crown", "Bridge", "Clockwork", "Market",
    "Veil", "Kingdom",
)  # fmt: skip
_TERRAIN = ("river", "lake", "coast", "plain", "valley", "hills")


class Draw:
    """Choices from ``random.Random.random()`` only (stable across Python versions)."""

    def __init__(self, seed: int):
        self._rng = random.Random(seed)

    def below(self, n: int) -> int:
        return min(int(self._rng.random() * n), n - 1)

    def pick(self, items: Sequence):
        return items[self.below(len(items))]

    def chance(self, p: float) -> bool:
        return self._rng.random() < p

    def between(self, low: int, high: int) -> int:
        """An int in [low, high]."""
        return low + self.below(high - low + 1)

    def shuffle(self, items: list) -> None:
        for i in range(len(items) - 1, 0, -1):
            j = self.below(i + 1)
            items[i], items[j] = items[j], items[i]


@dataclass(slots=True)
class Country:
    name: str
    region: str
    capital: City | None = None


@dataclass(slots=True)
class City:
    name: str
    country: Country
    founded: int
    population: int
    terrain: str
    natives: list[Person] = field(default_factory=list)


@dataclass(slots=True)
class Person:
    name: str
    occupation: str
    born: int
    birthplace: City
    title: str = ""  # the passage title: the name, disambiguated for namesakes
    employer: Organisation | None = None
    works: list[Work] = field(default_factory=list)
    mentor: Person | None = None


@dataclass(slots=True)
class Organisation:
    name: str
    kind: str
    founded: int
    founder: Person
    seat: City


@dataclass(slots=True)
class Work:
    title: str
    kind: str
    year: int
    creator: Person


@dataclass
class World:
    countries: list[Country]
    cities: list[City]
    people: list[Person]
    organisations: list[Organisation]
    works: list[Work]


def _word(draw: Draw, syllables: int) -> str:
    return "".join(draw.pick(_ONSETS) + draw.pick(_VOWELS) + draw.pick(_CODAS) for _ in range(syllables)).capitalize()


def _unique(draw: Draw, used: set[str], make) -> str:
    for _ in range(1000):
        name = make()
        if name not in used:
            used.add(name)
            return name
    raise RuntimeError("name space exhausted; enlarge the syllable lists")  # not reachable at sane sizes


def generate_world(num_people: int = 400, seed: int = 0) -> World:
    """A world with ``num_people`` people and places, organisations and works in proportion."""
    if num_people < 20:
        raise ValueError(f"num_people must be at least 20 (a world needs pairs to compare), got {num_people}")
    draw = Draw(seed)
    used: set[str] = set()
    regions = [f"{d} {_word(draw, 2)}" for d in ("north of", "south of", "east of", "west of")]
    countries = [
        Country(_unique(draw, used, lambda: _word(draw, 3)), draw.pick(regions)) for _ in range(max(4, num_people // 40))
    ]
    cities = []
    for i in range(max(12, num_people // 6)):
        name = _unique(draw, used, lambda: _word(draw, draw.between(2, 3)))
        country = countries[i] if i < len(countries) else draw.pick(countries)
        city = City(name, country, draw.between(700, 1850), draw.between(2, 900) * 1000, draw.pick(_TERRAIN))
        cities.append(city)
        if country.capital is None:
            country.capital = city

    people: list[Person] = []
    shared: set[str] = set()  # names held by two people
    for _ in range(num_people):
        occupation = draw.pick(OCCUPATIONS)
        born = draw.between(1700, 1975)
        if people and draw.chance(0.06):  # a namesake with another occupation: a retrieval distractor
            other = people[draw.below(len(people))]
            if other.occupation != occupation and other.name not in shared:
                shared.add(other.name)
                person = Person(other.name, occupation, born, draw.pick(cities))
                other.title = f"{other.name} ({other.occupation})"
                person.title = f"{person.name} ({occupation})"
                used.update((other.title, person.title))
                people.append(person)
                person.birthplace.natives.append(person)
                continue
        name = _unique(draw, used, lambda: f"{_word(draw, draw.between(1, 2))} {_word(draw, draw.between(2, 3))}")
        person = Person(name, occupation, born, draw.pick(cities), title=name)
        people.append(person)
        person.birthplace.natives.append(person)

    organisations = []
    for _ in range(max(6, num_people // 4)):
        founder = draw.pick(people)
        seat = draw.pick(cities)
        kind = draw.pick(ORG_KINDS)
        stem = seat.name if draw.chance(0.5) else founder.name.split()[-1]
        name = _unique(draw, used, lambda: f"{stem} {kind}" if draw.chance(0.7) else f"{_word(draw, 2)} {kind}")
        founded = min(founder.born + draw.between(25, 60), 2020)
        organisations.append(Organisation(name, kind, founded, founder, seat))
    for person in people:
        if draw.chance(0.7):
            person.employer = draw.pick(organisations)
        if draw.chance(0.5):
            person.mentor = draw.pick(people)
            if person.mentor is person:
                person.mentor = None

    works = []
    for person in people:
        if person.occupation not in WORK_KINDS:
            continue
        kind = WORK_KINDS[person.occupation][0]
        for _ in range(draw.between(1, 2)):
            title = _unique(draw, used, lambda: _work_title(draw, cities))
            work = Work(title, kind, person.born + draw.between(22, 65), person)
            person.works.append(work)
            works.append(work)
    return World(countries, cities, people, organisations, works)


def _work_title(draw: Draw, cities: Sequence[City]) -> str:
    form = draw.below(4)
    if form == 0:
        return f"The {draw.pick(_ADJECTIVES)} {draw.pick(_NOUNS)}"
    if form == 1:
        return f"{draw.pick(_NOUNS)} of {draw.pick(cities).name}"
    if form == 2:
        return f"The {draw.pick(_NOUNS)} of {_word(draw, 2)}"
    return f"{draw.pick(_ADJECTIVES)} {draw.pick(_NOUNS)} in {_word(draw, 2)}"
