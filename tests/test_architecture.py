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


#: The layers of the package, from the bottom, and the layers each may import besides its own modules: nothing
#: else, so no arrow runs upward or across and no two layers import each other.  docs/architecture.md draws it.
ALLOWED: dict[str, tuple[str, ...]] = {
    "core": (),                                          # the contract: TextEnv, spaces, anchors, make_grouped, typed
    "envs": ("core",),                                   # engines and their gym adapters, the registry, the package
    "wrappers": ("core", "envs"),                        # the prompt stack, tool calls, chats, SB3 adapters
    "algos.estimators": ("core",),                       # advantage rules on arrays
    "algos.policies": ("core", "wrappers"),              # the Policy contract and its backends
    "algos.training": ("core", "envs", "wrappers", "algos.estimators", "algos.policies"),
    "algos.leaderboard": ("core", "envs", "wrappers", "algos.policies", "algos.training"),
    "algos": ("core", "envs", "wrappers", "algos.estimators", "algos.policies", "algos.training", "algos.leaderboard"),  # commands
    # adapters to other libraries; TRL's GiGPOTrainer writes the training records (``algos.training.records``)
    "integrations": ("core", "envs", "wrappers", "algos.estimators", "algos.policies", "algos.training"),
    "cli": ("core", "envs", "wrappers", "algos", "integrations"),                    # the gigpo-gym command
}
#: Where each installed folder is (``package_dir`` in setup.cfg).
FOLDERS = {"gigpo_gym": "gigpo_gym", "algos": "gigpo_gym.algos", "wrappers": "gigpo_gym.wrappers"}


def layer_of(module: str) -> str:
    """The layer of a module of the package (``gigpo_gym.algos.training.rollout`` -> ``algos.training``)."""
    parts = module.split(".")
    if module in ("gigpo_gym", "gigpo_gym.registration") or parts[1:2] == ["envs"]:
        return "envs"
    if module == "gigpo_gym.cli":
        return "cli"
    if parts[1] == "algos":  # its sub-packages are layers; the package itself and its modules (the commands) one
        return f"algos.{parts[2]}" if len(parts) > 2 and f"algos.{parts[2]}" in ALLOWED else "algos"
    if parts[1] in ALLOWED:
        return parts[1]
    raise AssertionError(f"{module} is in no layer: add its package to ALLOWED (tests/test_architecture.py) and to "
                         "docs/architecture.md")


def _modules(root: Path = ROOT) -> dict[str, Path]:
    """Every module of the package (name -> file), as installed."""
    out = {}
    for folder, package in FOLDERS.items():
        for path in sorted((root / folder).rglob("*.py")):
            parts = list(path.relative_to(root / folder).with_suffix("").parts)
            out[".".join([package, *parts[:-1]] if parts[-1] == "__init__" else [package, *parts])] = path
    return out


def _arrows(root: Path = ROOT) -> dict[str, set[str]]:
    """module -> the package's modules it imports, at any depth of its file (lazy imports too).

    ``from package import submodule`` imports the submodule, not the package's face.
    """
    modules = _modules(root)

    def known(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    arrows: dict[str, set[str]] = {}
    for module, path in modules.items():
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                subs = [f"{node.module}.{alias.name}" for alias in node.names]
                names = subs if all(sub in modules for sub in subs) else [node.module]
            else:
                continue
            found.update(target for target in map(known, names) if target and target != module)
        arrows[module] = found
    return arrows


def test_every_import_follows_the_layer_table():
    arrows = _arrows()
    wrong = sorted(f"{module} ({layer_of(module)}) imports {target} ({layer_of(target)})"
                   for module, targets in arrows.items() for target in targets
                   if layer_of(target) != layer_of(module) and layer_of(target) not in ALLOWED[layer_of(module)])
    assert wrong == [], "arrows the layer table does not allow:\n" + "\n".join(wrong)


def _circles(arrows: dict[str, set[str]]) -> list[list[str]]:
    """The import circles of a graph: its strongly connected components of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(arrows.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            part = []
            while True:
                part.append(stack.pop())
                if part[-1] == node:
                    break
            if len(part) > 1:
                circles.append(sorted(part))

    for node in sorted(arrows):
        if node not in index:
            visit(node)
    return circles


def test_no_module_imports_itself_through_a_circle_and_the_table_has_none():
    assert _circles(_arrows()) == []
    assert _circles({layer: set(allowed) for layer, allowed in ALLOWED.items()}) == []


def test_the_circle_and_layer_checks_find_what_they_look_for(tmp_path):
    (tmp_path / "gigpo_gym" / "core").mkdir(parents=True)
    (tmp_path / "wrappers").mkdir()
    (tmp_path / "algos").mkdir()
    (tmp_path / "gigpo_gym" / "core" / "a.py").write_text("def f():\n    from gigpo_gym.wrappers.b import g\n")
    (tmp_path / "wrappers" / "b.py").write_text("from gigpo_gym.core import a\n")
    arrows = _arrows(tmp_path)
    assert arrows == {"gigpo_gym.core.a": {"gigpo_gym.wrappers.b"}, "gigpo_gym.wrappers.b": {"gigpo_gym.core.a"}}
    assert _circles(arrows) == [["gigpo_gym.core.a", "gigpo_gym.wrappers.b"]]
    assert "wrappers" not in ALLOWED[layer_of("gigpo_gym.core.a")]
    with pytest.raises(AssertionError, match="gigpo_gym.plugins.x is in no layer"):
        layer_of("gigpo_gym.plugins.x")


def test_the_architecture_page_draws_the_table():
    """docs/architecture.md lists each layer with what it may import, as ALLOWED says."""
    page = (ROOT / "docs" / "architecture.md").read_text()
    for layer, allowed in ALLOWED.items():
        row = f"| `{layer}` | {', '.join(f'`{a}`' for a in allowed) or '(nothing)'} |"
        assert row in page, f"docs/architecture.md has no row {row}"


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


def test_the_env_suite_never_imports_torch():
    """The envs and the wrappers run without torch; the wrappers load a tokenizer (transformers) only where the
    ``tools`` template is asked to count tokens or list tool schemas."""
    assert _offenders(["gigpo_gym/core", "gigpo_gym/envs"], ("torch", "transformers")) == []
    assert _offenders(["wrappers"], ("torch",)) == []


def test_engines_import_no_gymnasium():
    """Only core/ touches gymnasium: env adapters subclass core.TextEnv, engines are plain code."""
    assert _offenders(["gigpo_gym/envs"], ("gymnasium",)) == []


def test_estimators_import_no_torch():
    assert _offenders(["algos/estimators"], ("torch", "transformers")) == []


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
