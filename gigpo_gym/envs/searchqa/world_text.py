"""The fictional world as encyclopedia passages and as questions.

Passages are wiki-18 style (quoted title, then text).  Each fact a question needs
is stated in exactly one entity's passage, and passages name other entities
without their facts (a work names where it premiered, not where its maker was
born), so a bridge question needs two searches and the distractors look relevant.
"""

from __future__ import annotations

from collections.abc import Iterator

from gigpo_gym.envs.searchqa.corpus import Document
from gigpo_gym.envs.searchqa.questions import Question
from gigpo_gym.envs.searchqa.world import WORK_KINDS, Draw, Person, World

TASK_TYPES = ("single_hop", "bridge", "comparison")
_WORK_YEAR_VERB = {
    "novel": "published",
    "poetry collection": "published",
    "symphony": "first performed",
    "painting": "completed",
    "film": "released",
}


def _surname(person: Person) -> str:
    return person.name.split()[-1]


def _article(word: str) -> str:
    return "an" if word[0] in "aeiou" else "a"


def _listing(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def world_passages(world: World, seed: int = 0) -> Iterator[Document]:
    """Every passage of the world, in a fixed order, ids ``"0"``, ``"1"``, ..."""
    draw = Draw(seed + 1)
    n = 0

    def doc(title: str, text: str) -> Document:
        nonlocal n
        n += 1
        return Document.from_title_text(str(n - 1), f'"{title}"', text)

    for country in world.countries:
        yield doc(
            country.name,
            f"{country.name} is a country to the {country.region}. Its capital is {country.capital.name}. "
            f"The {country.name} national archive keeps records reaching back several centuries.",
        )
    for city in world.cities:
        yield doc(
            city.name,
            f"{city.name} is a city in {city.country.name}, founded in {city.founded}. It lies by a {city.terrain} "
            f"and had a population of about {city.population:,} at the last census.",
        )
        if city.natives:
            shown = [f"the {p.occupation} {p.name}" for p in city.natives[:4]]
            yield doc(city.name, f"Notable people born in {city.name} include {_listing(shown)}.")
    for person in world.people:
        sentences = [f"{person.name} (born {person.born}) is {_article(person.occupation)} {person.occupation}, born in {person.birthplace.name}."]
        if person.employer is not None:
            sentences.append(f"{_surname(person)} worked at the {person.employer.name}.")
        if person.mentor is not None:
            sentences.append(f"{_surname(person)} studied under the {person.mentor.occupation} {person.mentor.name}.")
        if person.works:
            listed = [f"the {w.kind} {w.title}" for w in person.works]
            sentences.append(f"{_surname(person)} is best known for {_listing(listed)}.")
        if draw.chance(0.4):
            other = draw.pick(world.people)
            sentences.append(f"{_surname(person)} corresponded for years with {other.name}.")
        yield doc(person.title, " ".join(sentences))
    for org in world.organisations:
        yield doc(
            org.name,
            f"The {org.name} is {_article(org.kind.lower())} {org.kind.lower()} based in {org.seat.name}. It was founded in {org.founded} by the "
            f"{org.founder.occupation} {org.founder.name}.",
        )
    for work in world.works:
        maker = WORK_KINDS[work.creator.occupation][2]
        venue = draw.pick(world.cities).name
        yield doc(
            work.title,
            f"{work.title} is a {work.kind} by the {work.creator.occupation} {work.creator.name}, "
            f"{_WORK_YEAR_VERB[work.kind]} in {work.year}. It was first presented in {venue}, and its {maker} "
            f"revised it several times.",
        )


def _person(p: Person) -> str:
    return f"the {p.occupation} {p.name}"


def world_questions(world: World, seed: int = 0) -> Iterator[Question]:
    """Single-hop, bridge and comparison questions with gold answers and supporting titles."""
    draw = Draw(seed + 2)
    counts = dict.fromkeys(TASK_TYPES, 0)

    def q(task_type: str, text: str, answer: str, *supports: str) -> Question:
        counts[task_type] += 1
        qid = f"{task_type}_{counts[task_type]:05d}"
        return Question(qid, text, (answer,), task_type, tuple(supports))

    for p in world.people:
        if draw.chance(0.5):
            yield q("single_hop", f"In what year was {_person(p)} born?", str(p.born), p.title)
        else:
            yield q("single_hop", f"In which city was {_person(p)} born?", p.birthplace.name, p.title)
        yield q("bridge", f"In which country was {_person(p)} born?", p.birthplace.country.name, p.title, p.birthplace.name)
        if p.mentor is not None and draw.chance(0.5):
            m = p.mentor
            yield q("bridge", f"In which city was the teacher of {_person(p)} born?", m.birthplace.name, p.title, m.title)
        elif p.employer is not None and draw.chance(0.5):
            e = p.employer
            yield q("bridge", f"Who founded the organisation where {_person(p)} worked?", e.founder.name, p.title, e.name)
    for w in world.works:
        kind, verb, maker = WORK_KINDS[w.creator.occupation]
        yield q("single_hop", f"Who {verb} the {kind} {w.title}?", w.creator.name, w.title)
        c = w.creator
        yield q("bridge", f"In which city was the {maker} of the {kind} {w.title} born?", c.birthplace.name, w.title, c.title)
    for o in world.organisations:
        if draw.chance(0.5):
            yield q("single_hop", f"Who founded the {o.name}?", o.founder.name, o.name)
        else:
            yield q("single_hop", f"In which city is the {o.name} based?", o.seat.name, o.name)
        yield q("bridge", f"In what year was the founder of the {o.name} born?", str(o.founder.born), o.name, o.founder.title)
    for city in world.cities:
        yield q("single_hop", f"In which country is the city of {city.name}?", city.country.name, city.name)

    people, orgs = world.people, world.organisations
    for _ in range(len(people) // 2):
        a, b = draw.pick(people), draw.pick(people)
        if a.born != b.born and a.name != b.name:
            first = a if a.born < b.born else b
            yield q("comparison", f"Who was born first, {_person(a)} or {_person(b)}?", first.name, a.title, b.title)
        a = draw.pick(people)
        b = draw.pick(a.birthplace.natives) if draw.chance(0.5) else draw.pick(people)
        if a is not b:
            same = "yes" if a.birthplace is b.birthplace else "no"
            yield q("comparison", f"Were {_person(a)} and {_person(b)} born in the same city?", same, a.title, b.title)
    for _ in range(len(orgs) // 2):
        a, b = draw.pick(orgs), draw.pick(orgs)
        if a.founded != b.founded:
            first = a if a.founded < b.founded else b
            yield q("comparison", f"Which was founded earlier, the {a.name} or the {b.name}?", first.name, a.name, b.name)


def split_questions(questions: list[Question], seed: int = 0, test_fraction: float = 0.1) -> dict[str, list[Question]]:
    """A fixed train/test split (about ``test_fraction`` of each task type in test)."""
    draw = Draw(seed + 3)
    splits: dict[str, list[Question]] = {"train": [], "test": []}
    for question in questions:
        splits["test" if draw.chance(test_fraction) else "train"].append(question)
    return splits
