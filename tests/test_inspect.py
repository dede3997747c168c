"""Records of a run's task groups and ``gigpo-gym inspect``'s page of them, checked in a real browser too."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import numpy as np
import pytest
from test_trainer import small_config

from gigpo_gym.algos import StepBatch, get_algorithm
from gigpo_gym.algos.inspect.page import InspectError, load, render, write_page
from gigpo_gym.algos.training.records import (
    EpisodeView, Recorder, StepView, Updated, choose_groups, iteration_record, read_record, recorded_iterations)
from gigpo_gym.algos.training.trainer import run_training
from gigpo_gym.cli import main

RUN = ["model.choose_admissible=true", "env.num_groups=3", "env.group_size=3", "records.groups=2", "save_every=1"]


def untimed(value):
    """``value`` without its clock readings (keys naming seconds or a rate per second) and the run's own paths."""
    if isinstance(value, dict):
        return {k: untimed(v) for k, v in value.items()
                if "seconds" not in k and "per_s" not in k and k not in ("run_dir", "final_checkpoint", "curve")}
    return value


def timeless(path: Path) -> list[dict]:
    return [untimed(json.loads(line)) for line in path.read_text().splitlines()]


def train(tmp_path: Path, *extra: str) -> Path:
    cfg = small_config(tmp_path, *RUN, *extra)
    run_training(cfg, echo=lambda *_: None)
    return Path(cfg.run_dir)


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    """A tiny two-iteration GiGPO run with its records."""
    return train(tmp_path_factory.mktemp("recorded"))


def steps_of(record: dict) -> list[dict]:
    return [s for g in record["groups"] for e in g["episodes"] for s in e["steps"]]


def test_a_run_records_whole_task_groups_with_their_step_groups_and_advantages(run):
    assert recorded_iterations(run / "records") == [1, 2]
    record = read_record(run / "records", 2)
    assert record["source"] == "trainer" and record["grouping"] == "estimator" and record["algo"]["name"] == "gigpo"
    assert len(record["groups"]) == 2 and all(len(g["episodes"]) == 3 for g in record["groups"])
    assert record["batch"]["trajectories"] == 9 and record["batch"]["task_groups"] == 3
    omega = record["algo"]["omega"]
    for group in record["groups"]:
        steps = [s for e in group["episodes"] for s in e["steps"]]
        # a step group lies inside one task group, and whole groups are recorded: its size in the batch is its count here
        counts = {g: sum(s["g"] == g for s in steps) for g in {s["g"] for s in steps}}
        assert all(s["size"] == counts[s["g"]] for s in steps)
        assert all(len({s["anchor"] for s in steps if s["g"] == g}) == 1 for g in counts)
        for e in group["episodes"]:
            assert [s["t"] for s in e["steps"]] == list(range(e["length"]))
            assert e["return"] == pytest.approx(sum(s["r"] for s in e["steps"]), abs=1e-4)
            assert e["steps"][0]["to_go"] == pytest.approx(e["return"], abs=1e-4)
            for s in e["steps"]:
                assert s["adv"] == pytest.approx(s["adv_e"] + omega * s["adv_s"], abs=1e-4)
                assert record["texts"][s["action"]] in ("go east", "go west", "wait") and s["valid"]
                assert "room" in record["texts"][s["obs"]]
    b = record["batch"]
    assert 0 <= b["rows_in_shared_groups"] <= 1 and b["step_group_size_mean"] >= 1
    assert sum(b["size_counts"].values()) == b["step_groups"] and sum(int(k) * v for k, v in b["size_counts"].items()) == b["rows"] and set(b["success"]) >= {"all"}


def test_the_sample_is_drawn_on_its_own_stream():
    assert choose_groups([5, 5, 7], 4, seed=0, iteration=3) == [5, 7]
    picked = choose_groups(range(16), 2, seed=0, iteration=3)
    assert picked == choose_groups(range(16), 2, seed=0, iteration=3) and len(picked) == 2
    assert any(choose_groups(range(16), 2, seed=0, iteration=it) != picked for it in range(4, 9))


def test_the_same_record_is_written_as_the_same_bytes(tmp_path):
    files = []
    for name in ("a", "b"):
        recorder = Recorder(tmp_path / name, groups=2, seed=0)
        recorder.add({"iteration": 3, "groups": [], "texts": ["é"]})
        files += recorder.flush()
    assert files[0].read_bytes() == files[1].read_bytes() and read_record(tmp_path / "a", 3)["texts"] == ["é"]
    assert recorded_iterations(tmp_path / "a") == [3] and not list((tmp_path / "a").glob(".*"))  # no temporary left


@pytest.mark.slow
def test_recording_changes_no_number_and_off_writes_what_a_run_wrote_before(run, tmp_path):
    off = train(tmp_path, "records.groups=0")
    assert timeless(off / "metrics.jsonl") == timeless(run / "metrics.jsonl")
    assert not (off / "records").exists()
    listing = {str(p.relative_to(off)) for p in off.rglob("*") if "tensorboard" not in p.parts}
    recorded = {str(p.relative_to(run)) for p in run.rglob("*") if "tensorboard" not in p.parts}
    assert recorded - listing == {"records", "records/iter-000001.json.gz", "records/iter-000002.json.gz"}
    assert listing <= recorded
    assert untimed(json.loads((off / "summary.json").read_text())) == untimed(json.loads((run / "summary.json").read_text()))
    assert main(["inspect", str(off)]) == 2


@pytest.mark.slow
def test_a_grpo_run_records_the_anchors_gigpo_would_have_grouped(tmp_path):
    run = train(tmp_path, "algo.name=grpo", "iterations=1")
    record = read_record(run / "records", 1)
    assert record["grouping"] == "anchors" and record["algo"]["name"] == "grpo"
    steps = steps_of(record)
    assert all(s["adv_s"] is None and s["adv"] == s["adv_e"] for s in steps)
    assert any(s["size"] >= 2 for s in steps) and record["batch"]["mean_abs_step_advantage"] is None


def test_inspect_writes_one_self_contained_page_and_names_what_it_cannot_show(run, tmp_path, capsys):
    out = tmp_path / "page.html"
    assert main(["inspect", str(run), "--out", str(out)]) == 0
    page = out.read_text()
    assert "wrote" in capsys.readouterr().out
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page) and "<link" not in page
    assert page.count('<svg class="plot"') == 7 and '"kind":"run"' in page
    assert main(["inspect", str(run), "--iteration", "1", "--out", str(tmp_path / "one.html")]) == 0
    assert json.loads(re.search(r'type="application/json">(.*?)</script>', (tmp_path / "one.html").read_text()).group(1)
                      )["records"].keys() == {"1"}

    assert main(["inspect", str(run), "--iteration", "7"]) == 2
    assert capsys.readouterr().err.strip() == f"error: iteration 7 is not recorded in {run} (recorded: 1-2): pick one of those"
    (tmp_path / "empty").mkdir()
    assert main(["inspect", str(tmp_path / "empty")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is not a training run" in err[0] and "gigpo-gym train" in err[0]
    old = tmp_path / "old"
    old.mkdir()
    (old / "metrics.jsonl").write_text("{}\n")
    assert main(["inspect", str(old)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is a run without records" in err[0] and "records.groups > 0" in err[0]


def test_the_data_cannot_close_its_script_element():
    data = {"kind": "leaderboard", "title": "x", "path": "p", "charts": [],
            "episodes": [{"index": 0, "task_id": "</script><script>alert(1)</script>", "won": True}]}
    page = render(data)
    assert page.count("</script>") == 2  # the data's and the code's own


def test_a_leaderboard_episode_file_browses_its_episodes(tmp_path):
    from gigpo_gym.algos.leaderboard.journal import EpisodeJournal

    path = tmp_path / "alfworld-valid_seen__random.abcdef12.episodes.jsonl"
    book = EpisodeJournal(path, {"config_hash": "abcdef1234", "spec": "alfworld-valid_seen", "policy": "random"})
    for k in range(4):
        book.append(7, k, {"index": k, "round_seed": 7, "reset_seed": k, "task_id": f"t{k}", "task_type": "pick" if k % 2
                           else "look", "status": "terminated", "won": k == 1, "return": float(k == 1), "steps": 3,
                           "invalid_steps": 0, "final": {}, "error": None}, 1.0)
    book.close()
    with path.open("a") as f:
        f.write('{"round_seed": 7, "k": 9, "epis')  # a line a kill cut short
    data = load(path)
    assert data["kind"] == "leaderboard" and [e["task_id"] for e in data["episodes"]] == ["t0", "t1", "t2", "t3"]
    assert main(["inspect", str(path)]) == 0 and (tmp_path / f"{path.name}.html").is_file()
    bad = tmp_path / "notes.json"
    bad.write_text('{"a": 1}')
    with pytest.raises(InspectError, match="neither a run folder nor a leaderboard file"):
        load(bad)


# -- in a real browser -------------------------------------------------------------------------------------
def demo_sized_run(folder: Path, iterations: int = 30) -> Path:
    """Records the size of the demo's (2 of 8 task groups of 4, up to 30 steps, ALFWorld-length texts), made by
    the recorder itself from synthetic batches."""
    rng = np.random.default_rng(0)
    recorder = Recorder(folder / "records", groups=2, seed=0)
    algo = get_algorithm("gigpo", backend="numpy")
    for it in range(1, iterations + 1):
        rows = []
        for traj in range(32):
            length = int(rng.integers(5, 31))
            for t in range(length):
                rows.append({"group_id": traj // 4, "traj_id": traj, "step_id": t, "anchor": f"{traj // 4}-{rng.integers(0, 12)}",
                             "reward": 10.0 if t == length - 1 and rng.random() < 0.3 else -0.1 * (rng.random() < 0.2)})
        batch = StepBatch.from_rows(rows)
        parts = algo.advantage_parts(batch)
        episodes = [EpisodeView(t, f"task-{t // 4}", "pick" if t % 8 < 4 else "look", bool(rng.random() < 0.3),
                                "terminated", 0.0) for t in range(32)]

        def step_of(row: int) -> StepView:
            observation = f"You are in the middle of a room {row}. " + "Looking quickly around you, you see a cabinet. " * 6
            return StepView(observation, f"<action>go to cabinet {row % 9}</action>", f"go to cabinet {row % 9}", True, 0.0)

        recorder.add(iteration_record(it, Updated(batch, parts.advantages, np.ones(len(batch), bool), parts),
                                      choose_groups(batch.group_ids, 2, 0, it), episodes, step_of,
                                      {"all": 0.3, "pick": 0.2, "look": 0.4}, algo=algo.config(), source="trainer"))
    recorder.flush()
    (folder / "metrics.jsonl").write_text("")
    return folder


@pytest.fixture(scope="module")
def chromium():
    pytest.importorskip("selenium", reason='the browser test needs selenium: pip install ".[browser]"')
    from gigpo_gym.envs.webshop.browser import BrowserUnavailableError, HeadlessChromium

    try:
        browser = HeadlessChromium(window_size=(1400, 1000))
    except BrowserUnavailableError as e:
        pytest.skip(str(e))
    yield browser.driver
    browser.quit()


def open_page(driver, page: Path) -> float:
    """Load ``page``; the seconds until the page is drawn (its script has run)."""
    started = time.perf_counter()
    driver.get(page.resolve().as_uri())
    driver.find_element("css selector", "#summary .stat, #summary span")
    return time.perf_counter() - started


@pytest.mark.browser
def test_the_page_shows_the_groups_marks_equal_anchors_and_lights_a_group_in_chromium(run, tmp_path, chromium):
    from selenium.webdriver.common.action_chains import ActionChains

    page = write_page(run, tmp_path / "run.html")
    open_page(chromium, page)
    assert chromium.get_log("browser") == []  # no error, no warning in the console
    groups = chromium.find_elements("css selector", "section.group")
    assert len(groups) == 2
    assert len(chromium.find_elements("css selector", "svg.plot")) == 7
    marked = chromium.find_elements("css selector", "td.cell.shared")
    assert marked, "no step shares its anchor with another"
    code = marked[0].get_attribute("data-g")
    members = chromium.find_elements("css selector", f'td.cell[data-g="{code}"]')
    ActionChains(chromium).move_to_element(marked[0]).perform()
    lit = chromium.find_elements("css selector", "td.cell.lit")
    assert {c.get_attribute("data-g") for c in lit} == {code} and len(lit) == len(members) >= 2
    marked[0].click()
    assert len(chromium.find_elements("css selector", "td.cell.pinned")) == len(members)
    type_of_first = groups[0].get_attribute("data-type")
    chromium.find_element("css selector", f'#pick-type option[value="{type_of_first}"]').click()
    assert {g.get_attribute("data-type") for g in chromium.find_elements("css selector", "section.group")} == {type_of_first}
    chromium.find_element("css selector", '#pick-iteration option[value="1"]').click()
    assert "iteration 1" in chromium.find_element("css selector", "#summary").text
    assert chromium.get_log("browser") == []


@pytest.mark.browser
def test_a_thirty_iteration_demo_sized_page_loads_in_under_two_seconds(tmp_path, chromium):
    page = write_page(demo_sized_run(tmp_path / "demo"), tmp_path / "demo.html")
    seconds = min(open_page(chromium, page) for _ in range(2))
    assert chromium.get_log("browser") == []
    assert len(chromium.find_elements("css selector", "section.group")) == 2
    assert seconds < 2.0, f"the page took {seconds:.2f} s ({page.stat().st_size / 1e6:.1f} MB)"
