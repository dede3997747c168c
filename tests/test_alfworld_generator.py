"""Generated households: deterministic, split-aware, always solvable; the expert wins
every task; random admissible play never crashes."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from gigpo_gym.envs.alfworld import catalog
from gigpo_gym.envs.alfworld.engine import NOTHING, Engine
from gigpo_gym.envs.alfworld.expert import expert_action, expert_plan
from gigpo_gym.envs.alfworld.generator import HELD_OUT_SCENES, generate_task


def _scene(world) -> int:
    return int(world.task_id.split("/")[1].rsplit("-", 1)[1])


def test_same_seed_same_task_different_seed_different_task():
    a, b = generate_task(0, "train", 17), generate_task(0, "train", 17)
    assert (a.task_id, a.goal_text, a.receptacles, a.objects, a.init) == (b.task_id, b.goal_text, b.receptacles, b.objects, b.init)
    c = generate_task(1, "train", 17)
    assert (c.receptacles, c.objects) != (a.receptacles, a.objects)


def test_splits_use_seen_and_held_out_scenes():
    train = {_scene(generate_task(0, "train", i)) for i in range(150)}
    seen = {_scene(generate_task(0, "valid_seen", i)) for i in range(60)}
    unseen = {_scene(generate_task(0, "valid_unseen", i)) for i in range(40)}
    assert unseen <= set(HELD_OUT_SCENES) and not train & set(HELD_OUT_SCENES)
    assert not seen & set(HELD_OUT_SCENES)
    assert generate_task(0, "valid_seen", 3).task_id != generate_task(0, "train", 3).task_id


def test_all_six_task_types_with_alfworld_goal_sentences():
    worlds = [generate_task(0, "train", i) for i in range(120)]
    assert set(Counter(w.task_type for w in worlds)) == set(catalog.TASK_TYPES)
    for w in worlds:
        t = w.target
        sentences = {
            tmpl.format(obj=t["otype"].lower(), recep=(t["rtype"] or "").lower(), toggle=(t["toggle"] or "").lower())
            for tmpl in catalog.GOAL_TEMPLATES[w.task_type]
        }
        assert w.goal_text in sentences
        assert w.task_id.startswith(f"train/{catalog.TASK_TYPES[w.task_type]}-{t['otype']}-None-")


def test_task_types_filter():
    assert {generate_task(0, "train", i, ("heat", "cool")).task_type for i in range(40)} == {"heat", "cool"}


def test_placement_rules_hold():
    for i in range(60):
        w = generate_task(3, "train", i)
        for o, recs in enumerate(w.init.obj_in):
            item = w.objects[o]
            for r in recs:
                rtype = w.receptacles[r].rtype
                assert item.otype in catalog.TOGGLEABLE or (rtype, item.otype) in w.can_contain
            assert w.init.obj_loc[o] == w.receptacles[recs[0]].loc
        assert all(r.openable == (r.rtype in catalog.OPENABLE) for r in w.receptacles)


def test_expert_wins_1000_generated_tasks():
    lengths = []
    for split, n in (("train", 800), ("valid_seen", 100), ("valid_unseen", 100)):
        for i in range(n):
            engine = Engine(generate_task(0, split, i))
            engine.reset()
            assert not engine.won, "a task must not start solved"
            plan = expert_plan(engine)
            assert engine.won, (engine.world.task_id, plan)
            lengths.append(len(plan))
    assert max(lengths) <= 20 and sum(lengths) / len(lengths) < 10


def test_random_admissible_play_never_crashes_and_every_command_acts():
    rng = random.Random(0)
    for i in range(60):
        engine = Engine(generate_task(0, "train", i))
        engine.reset()
        for _ in range(50):
            cmd = rng.choice(engine.admissible_commands())
            text, valid = engine.step(cmd)
            assert valid and text and text != NOTHING, (cmd, text)
            if engine.won:
                break
        if not engine.won:  # the expert recovers from wherever random play left it
            for _ in range(40):
                assert engine.step(expert_action(engine))[1]
                if engine.won:
                    break
            assert engine.won, engine.world.task_id


def test_unknown_split_suggests_a_close_name():
    with pytest.raises(ValueError, match="unknown split 'valid_unsen'.*Did you mean 'valid_unseen'"):
        generate_task(0, "valid_unsen", 0)
