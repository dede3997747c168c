"""The import rules of docs/architecture.md: which layer may load torch, which may see which."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Each runs in a fresh interpreter, then reports which heavy modules it loaded.
TORCH_FREE_USES = {
    "env suite": """
import gymnasium as gym, gigpo_gym
from gigpo_gym.wrappers import PromptConfig, wrap_for_llm
for env_id in ("gigpo_gym/ALFWorld-v0", "gigpo_gym/WebShop-v0", "gigpo_gym/SearchQA-v0"):
    env = wrap_for_llm(gym.make(env_id), PromptConfig(history_length=1))
    env.reset(seed=0)
    env.step("<action>look</action>")
envs = gigpo_gym.make_grouped("gigpo_gym/ALFWorld-v0", num_groups=2, group_size=2, seed=0)
envs.reset()
""",
    "estimators": """
import numpy as np
from gigpo_gym.algos import StepBatch, available_algorithms, get_algorithm
import gigpo_gym.algos.estimators
batch = StepBatch(group_ids=[0, 0], traj_ids=[0, 1], step_ids=[0, 0], rewards=[1.0, 0.0], anchors=["a", "a"])
for name in available_algorithms():
    if name != "ppo":
        get_algorithm(name).advantages(batch)
""",
    "reference policies and the leaderboard": """
from gigpo_gym.algos.policies.base import SamplingParams
from gigpo_gym.algos.policies.reference import ExpertPolicy, RandomAdmissiblePolicy
from gigpo_gym.algos.training.rollout import collect
from gigpo_gym.algos.leaderboard.runner import load_spec, run_spec
from gigpo_gym.algos.leaderboard.rounds import guarded_stack
from gigpo_gym.algos.training.config import load_config
load_config(None, ["prompt.template=paper"])
from gigpo_gym.algos.leaderboard.render import render
import gigpo_gym.algos.leaderboard.policies
""",
    "the run inspector": """
from gigpo_gym.algos.inspect.page import render
from gigpo_gym.algos.training.records import iteration_record
render({"kind": "leaderboard", "title": "t", "path": "p", "charts": [], "episodes": []})
""",
    "served models and the paper's prompts": """
from gigpo_gym.algos.policies.chat_api import ChatAPIPolicy
from gigpo_gym.algos.leaderboard.journal import EpisodeJournal
from gigpo_gym.wrappers.templates import paper_stack
""",
}


@pytest.mark.parametrize("use", sorted(TORCH_FREE_USES))
def test_layer_runs_without_torch(use):
    code = TORCH_FREE_USES[use] + "\nimport sys\nprint(sorted(m for m in ('torch', 'transformers') if m in sys.modules))\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "[]", f"{use} imported {out.stdout.strip()}"


def _imports(path: Path) -> set[str]:
    """Every module a file imports, at any depth of the file (lazy imports included)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return names


def _files(folder: str) -> list[Path]:
    return sorted((ROOT / folder).rglob("*.py"))


def _offenders(folders: list[str], banned: tuple[str, ...]) -> list[str]:
    return [
        f"{path.relative_to(ROOT)} imports {name}"
        for folder in folders for path in _files(folder) for name in sorted(_imports(path))
        if any(name == b or name.startswith(b + ".") for b in banned)
    ]


def test_envs_and_core_never_import_the_algorithm_side():
    assert _offenders(["gigpo_gym/core", "gigpo_gym/envs"], ("gigpo_gym.algos", "torch", "transformers")) == []


def test_engines_import_no_gymnasium():
    """Only core/ touches gymnasium: env adapters subclass core.TextEnv, engines are plain code."""
    assert _offenders(["gigpo_gym/envs"], ("gymnasium",)) == []


def test_estimators_import_no_torch_and_nothing_above_them():
    banned = ("torch", "transformers", "gigpo_gym.algos.policies", "gigpo_gym.algos.training", "gigpo_gym.algos.leaderboard")
    assert _offenders(["algos/estimators"], banned) == []


def test_policies_never_import_training_or_leaderboard():
    assert _offenders(["algos/policies"], ("gigpo_gym.algos.training", "gigpo_gym.algos.leaderboard")) == []


def test_training_never_imports_the_leaderboard():
    assert _offenders(["algos/training"], ("gigpo_gym.algos.leaderboard",)) == []


def test_the_leaderboard_reads_runs_without_the_training_loop():
    """A run folder is read through ``RunFolder`` and rebuilt by ``build_policy``, not through the trainer module."""
    assert _offenders(["algos/leaderboard"], ("gigpo_gym.algos.training.trainer",)) == []


def test_the_command_line_builds_without_servers_search_indexes_or_torch():
    """Every ``gigpo-gym`` command builds the whole parser first: it must not pay for any command's work."""
    code = (
        "import sys\nfrom gigpo_gym.cli import build_parser\nbuild_parser()\n"
        "print(sorted(m for m in ('fastapi', 'uvicorn', 'bm25s', 'torch', 'transformers') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "[]", f"building the parser imported {out.stdout.strip()}"


def _private_uses(path: Path, root: Path = ROOT) -> list[str]:
    """Private names (``_x``) of another module that ``path`` imports or reads off an imported module."""
    tree = ast.parse(path.read_text(), filename=str(path))
    modules: dict[str, str] = {}  # local name -> the package module it stands for
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("gigpo_gym") and not node.level:
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    found.append(f"{path.relative_to(root)}:{node.lineno} imports {node.module}.{alias.name}")
                modules[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("gigpo_gym"):
                    modules[alias.asname or alias.name] = alias.name
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules
                and node.attr.startswith("_") and not node.attr.startswith("__")):
            found.append(f"{path.relative_to(root)}:{node.lineno} reads {modules[node.value.id]}.{node.attr}")
    return found


def test_no_module_uses_another_module_s_private_names():
    """A name that starts with ``_`` is its module's own: the package and the benchmarks use public names only."""
    files = [p for folder in ("gigpo_gym", "algos", "wrappers", "benchmarks") for p in _files(folder)]
    assert [use for path in files for use in _private_uses(path)] == []


def test_the_private_name_check_finds_both_forms(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text("from gigpo_gym.algos.training.trainer import _warm_start, run_training\n"
                      "from gigpo_gym.algos.training import trainer as t\nt._save_selected(None)\nt.run_training\n")
    assert _private_uses(sample, root=tmp_path) == ["sample.py:1 imports gigpo_gym.algos.training.trainer._warm_start",
                    "sample.py:3 reads gigpo_gym.algos.training.trainer._save_selected"]


@pytest.mark.parametrize("module, name, replacement", [
    ("gigpo_gym.algos.training.trainer", "SELECTED_FILE", "RunFolder.SELECTED_FILE"),
    ("gigpo_gym.algos.training.trainer", "REFERENCE_FILE", "RunFolder.REFERENCE_FILE"),
    ("gigpo_gym.algos.training.trainer", "read_selected", "checkpoint.read_selected"),
    ("gigpo_gym.algos.training.trainer", "success_sem", "metrics.success_sem"),
    ("gigpo_gym.algos.training.trainer", "prompt_settings", "models.prompt_settings"),
    ("gigpo_gym.algos.leaderboard.policies", "NAMED", "POLICY_LOADERS"),
    ("gigpo_gym.algos.leaderboard.specs", "SPEC_KEYS", "fields(Spec)"),
])
def test_a_name_that_moved_still_imports_and_names_its_new_place(module, name, replacement):
    import importlib

    with pytest.warns(DeprecationWarning, match=replacement.replace("(", r"\(").replace(")", r"\)")):
        assert getattr(importlib.import_module(module), name) is not None


def test_old_wrapper_builders_warn_and_build_the_same_stack():
    import gymnasium as gym

    import gigpo_gym  # noqa: F401
    from gigpo_gym.algos.training.rollout import llm_wrapper, wrap_llm_env
    from gigpo_gym.wrappers import PromptConfig, wrap_for_llm

    with pytest.warns(DeprecationWarning, match="use gigpo_gym.wrappers.wrap_for_llm"):
        old = wrap_llm_env(gym.make("gigpo_gym/SearchQA-v0"), history_length=1, intro="Hi.")
    with pytest.warns(DeprecationWarning, match="use gigpo_gym.wrappers.llm_stack"):
        factory = llm_wrapper(history_length=1, intro="Hi.", anchor_mode="observation")
    new = wrap_for_llm(gym.make("gigpo_gym/SearchQA-v0"), PromptConfig(history_length=1, intro="Hi."))
    assert old.reset(seed=3)[0] == new.reset(seed=3)[0] == factory(gym.make("gigpo_gym/SearchQA-v0")).reset(seed=3)[0]
