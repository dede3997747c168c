"""The docs site (mkdocs.yml, docs/site_hooks.py) builds offline and in strict mode.

A broken link or anchor, a page left out of the nav, a figure that does not resolve or an
API reference entry that no longer matches the code is a warning, and strict mode makes it
fail the build, here and in ``make docs``. The build runs without a network interface where
the OS allows it (``unshare -rn``), and the built site loads nothing from the network.
"""

from __future__ import annotations

import ast
import html
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mkdocs", reason='the docs site needs the [docs] extra: pip install ".[docs]"')
pytest.importorskip("mkdocstrings_handlers.python", reason='the docs site needs the [docs] extra: pip install ".[docs]"')

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]
#: Repository files that are pages of the site, besides docs/.
ROOT_PAGES = {"README.md": "index.html", "CHANGELOG.md": "changelog.html", "CONTRIBUTING.md": "contributing.html"}


def _no_network() -> list[str]:
    """A command prefix that runs without any network interface, where the OS lets us (Linux namespaces)."""
    if shutil.which("unshare") and subprocess.run(["unshare", "-rn", "true"], capture_output=True).returncode == 0:
        return ["unshare", "-rn"]
    return []


def _build(config_dir: Path, site: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*_no_network(), sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=config_dir, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"}, capture_output=True, text=True, timeout=300,
    )


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    run = _build(ROOT, out)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-4000:]
    return out


def test_every_doc_is_a_page_of_the_site(site):
    pages = [p.relative_to(ROOT / "docs").with_suffix(".html") for p in (ROOT / "docs").rglob("*.md")]
    pages += [Path(page) for repo, page in ROOT_PAGES.items() if (ROOT / repo).is_file()]
    missing = [str(p) for p in pages if not (site / p).is_file()]
    assert not missing, f"pages missing from the site: {missing}"


def test_every_image_and_local_link_resolves(site):
    """Figures from benchmarks/results/ and links between pages point at files of the site."""
    broken, images = [], 0
    for page in site.rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        for tag, target in re.findall(r'<(img|a)\b[^>]*?(?:src|href)="([^"#]+)', text):
            target = html.unescape(target)
            if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("/"):
                continue
            images += tag == "img"
            if not (page.parent / target).resolve().exists():
                broken.append(f"{page.relative_to(site)} -> {target}")
    assert not broken, f"links and images that resolve to nothing: {broken[:20]}"
    shown = sum(p.read_text().count("![") for p in (ROOT / "docs").rglob("*.md"))
    assert shown and images >= shown, f"the docs show {shown} figures, the site {images}"


def test_the_site_loads_nothing_from_the_network(site):
    remote = re.compile(r'<(?:script|link|img|iframe|source)\b[^>]*?(?:src|href)="(?:https?:)?//[^"]+"')
    found = {str(p.relative_to(site)): remote.findall(p.read_text(encoding="utf-8")) for p in site.rglob("*.html")}
    assert not {k: v for k, v in found.items() if v}, "pages that fetch from another host"
    css = [str(p.relative_to(site)) for p in site.rglob("*.css") if re.search(r"url\((['\"]?)https?://", p.read_text())]
    assert not css, f"stylesheets that fetch from another host: {css}"


def _attribute_docs(path: Path, cls: str) -> dict[str, str]:
    """The attribute docstrings of a class (the string under each field), read from the source."""
    tree = ast.parse(path.read_text())
    body = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls).body
    return {a.target.id: b.value.value.replace("`", "") for a, b in zip(body, body[1:])
            if isinstance(a, ast.AnnAssign) and isinstance(b, ast.Expr) and isinstance(b.value, ast.Constant)}


def _squeezed(text: str) -> str:
    return re.sub(r"\s+", "", text)


def _text(page: Path) -> str:
    """A page's text without tags or white space (so rendering and wrapping do not matter)."""
    return _squeezed(html.unescape(re.sub(r"<[^>]+>", "", page.read_text(encoding="utf-8"))))


def test_the_api_reference_is_the_code(site):
    """Every trainer config field's help, read from the source, is on the config page."""
    config = ROOT / "algos" / "training" / "config.py"
    text = _text(site / "api" / "config.html")
    classes = ["TrainConfig", "ModelConfig", "EnvConfig", "SamplingConfig", "AlgoConfig", "OptimConfig", "SFTConfig"]
    missing = [f"{cls}.{name}" for cls in classes for name, doc in _attribute_docs(config, cls).items()
               if _squeezed(doc) not in text]
    assert not missing, f"config fields whose help is not in the API reference: {missing}"
    for page, names in {
        "envs": ["TextEnv", "make_grouped", "AnchorKey", "HistoryPrompt", "ActionParser"],
        "estimators": ["StepBatch", "get_algorithm", "register_algorithm", "GiGPO", "GRPO", "PPO"],
        "policies": ["Policy", "TrainablePolicy", "SamplingParams", "Generation", "HFPolicy"],
        "trainer": ["Trainer", "run_training", "RunFolder"],
        "episodes": ["collect", "Rollout", "PromptConfig", "wrap_for_llm", "register_template"],
        "leaderboard": ["Spec", "Evaluation", "run_spec", "resolve_policy", "register_policy_loader"],
    }.items():
        ids = re.findall(r'<h[2-4] id="([^"]+)"', (site / "api" / f"{page}.html").read_text())
        absent = [n for n in names if not any(i.endswith("." + n) for i in ids)]
        assert not absent, f"api/{page}: no heading for {absent}"


def _project_copy(tmp_path: Path) -> Path:
    """mkdocs.yml and docs/ copied (to break), the rest of the repository linked."""
    work = tmp_path / "repo"
    work.mkdir()
    shutil.copy(ROOT / "mkdocs.yml", work)
    shutil.copytree(ROOT / "docs", work / "docs")
    for name in (*ROOT_PAGES, "benchmarks", "gigpo_gym", "algos", "wrappers"):
        if (ROOT / name).exists():
            (work / name).symlink_to(ROOT / name)
    return work


@pytest.mark.parametrize("breakage, message", [
    ("[the guide](no_such_page.md)", "no_such_page.md"),
    ("[a section](training.md#no-such-section)", "#no-such-section"),
    ("![a figure](../benchmarks/results/no_such_figure.png)", "no_such_figure.png"),
    ("::: gigpo_gym.algos.NoSuchClass", "NoSuchClass"),
])
def test_a_broken_reference_fails_the_build(tmp_path, breakage, message):
    work = _project_copy(tmp_path)
    page = work / "docs" / "architecture.md"
    page.write_text(page.read_text() + f"\n\n{breakage}\n")
    run = _build(work, tmp_path / "site")
    assert run.returncode != 0, "the strict build passed a broken reference"
    assert message in run.stdout + run.stderr


def test_a_page_left_out_of_the_nav_fails_the_build(tmp_path):
    work = _project_copy(tmp_path)
    (work / "docs" / "orphan.md").write_text("# Orphan\n\nNo page links here and the nav leaves it out.\n")
    run = _build(work, tmp_path / "site")
    assert run.returncode != 0 and "orphan.md" in run.stdout + run.stderr


def test_every_report_is_listed_in_the_experiments_index():
    folder = ROOT / "docs" / "experiments"
    linked = set(re.findall(r"\]\(([\w.-]+\.md)\)", (folder / "index.md").read_text()))
    unlisted = [p.name for p in folder.glob("*.md") if p.name != "index.md" and p.name not in linked]
    assert not unlisted, f"reports the index (docs/experiments/index.md) does not list: {unlisted}"


def _nav_entry(page: Path, href: str) -> str:
    """The text of the primary navigation's link to ``href`` on a built page ("" when there is none)."""
    nav = page.read_text(encoding="utf-8").split('<nav class="md-nav md-nav--primary"', 1)[1]
    m = re.search(rf'<a href="{re.escape(href)}"[^>]*>(.*?)</a>', nav, re.S)
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", m.group(1))).split()) if m else ""


def test_a_new_report_needs_only_a_row_in_the_index(tmp_path):
    work = _project_copy(tmp_path)
    (work / "docs" / "experiments" / "new_question.md").write_text("# A new question\n\n**Question.** Does it?\n")
    index = work / "docs" / "experiments" / "index.md"
    index.write_text(index.read_text() + "\n| [The new question](new_question.md) | It does. |\n")
    run = _build(work, tmp_path / "site")
    assert run.returncode == 0, run.stderr[-3000:]
    assert _nav_entry(tmp_path / "site" / "index.html", "experiments/new_question.html") == "The new question"

