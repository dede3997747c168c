"""Leaderboard specs and result files: loading, checking, the result schema.

A spec (``benchmarks/specs/<name>.json``) is a typed, frozen ``Spec``, checked key by
key (errors name the file, the key and the closest valid one); a result is checked against
``benchmarks/leaderboard/result_schema.json`` with ``jsonschema`` before it is
written and again when it is read.  Specs, schema and the paper's rows ship in the
wheel (``gigpo_gym/benchmarks/``); results are written to the current directory, or
to the checkout's ``benchmarks/results/`` when the command runs inside the checkout
(an editable install run from elsewhere writes to where it runs), never into the install.
"""

from __future__ import annotations

import difflib
import json
import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import gymnasium as gym

from gigpo_gym.core.anchor import digest
from gigpo_gym.core.data import write_atomically
from gigpo_gym.core.typed import FieldError, check_fields, from_mapping
from gigpo_gym.wrappers.stack import PromptConfig

RESULT_VERSION = 1
SPEC_VERSION = 1
#: The benchmarks folder (specs, schema): ``$GIGPO_GYM_BENCHMARKS``, else the one beside ``algos/``
#: (a checkout's ``benchmarks/``; in a wheel ``gigpo_gym/benchmarks/``, see setup.cfg).
BENCHMARKS_DIR = Path(os.environ.get("GIGPO_GYM_BENCHMARKS") or Path(__file__).resolve().parents[2] / "benchmarks")
SPECS_DIR = BENCHMARKS_DIR / "specs"


def default_results_dir() -> Path:
    """The checkout's ``benchmarks/results`` when the current directory is inside that checkout, else ``.``."""
    results, checkout, here = BENCHMARKS_DIR / "results", BENCHMARKS_DIR.parent.resolve(), Path.cwd().resolve()
    inside = here == checkout or checkout in here.parents
    return results if inside and results.is_dir() else Path(".")


#: ``default_results_dir()`` when this module was imported (the commands ask again when they run).
RESULTS_DIR = default_results_dir()
SCHEMA_FILE = BENCHMARKS_DIR / "leaderboard" / "result_schema.json"
_OPTIONAL = ("title", "paper")


class LeaderboardError(ValueError):
    """A spec, policy or result file the leaderboard cannot use (the message says why)."""


# -- specs ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Spec:
    """One versioned evaluation protocol (``benchmarks/specs/<name>.json``; the keys are its fields).

    Made from its JSON by ``check_spec`` / ``load_spec``; every field is checked when the
    spec is made.  ``data`` is the JSON form (what results record and hash).
    """

    spec_version: int
    """The spec format (this runner reads 1)."""
    name: str
    """The spec's name: ``--envs NAME`` and the first part of its results' file names."""
    env_id: str
    """The env, with its version (``gigpo_gym/ALFWorld-v0``)."""
    env_version: str
    """The version ``env_id`` ends with (``v0``)."""
    env_kwargs: dict[str, Any]
    """``gym.make`` kwargs: which tasks (the split, ...)."""
    split: str
    """The split the tasks come from."""
    seeds: list[int]
    """Round seeds: round ``s`` plays ``episodes`` tasks, episode ``k`` the task of reset seed ``derive_seed(s, k)``."""
    episodes: int
    """Episodes per round (a run may play the first ``n`` of them)."""
    max_steps: int
    """Step limit of an episode."""
    history_length: int
    """Past steps in the prompt of a policy that has no prompts of its own (a run keeps its own)."""
    final_info_metrics: list[str]
    """Info keys whose last value each episode reports (WebShop's ``score``)."""
    reward: str
    """What success and return mean here."""
    title: str | None = None
    """A longer name for the board."""
    paper: str | None = None
    """The paper's rows this spec is comparable with (``benchmarks/leaderboard/paper_results.json``)."""
    path: str = field(default="", init=False, compare=False, metadata={"json": False})
    """The file the spec came from ("" when made in code)."""

    def __post_init__(self) -> None:
        from gigpo_gym.registration import env_spec

        check_fields(self)
        if self.spec_version != SPEC_VERSION:
            raise LeaderboardError(f"spec_version {self.spec_version} is not supported (this runner reads {SPEC_VERSION})")
        try:
            env_spec(self.env_id)
        except gym.error.UnregisteredEnv as e:
            raise LeaderboardError(str(e)) from None
        if not self.env_id.endswith("-" + self.env_version):
            raise LeaderboardError(f"env_version {self.env_version!r} does not match env_id {self.env_id!r}")
        if not self.seeds:
            raise LeaderboardError("seeds must be a non-empty list of integers, got []")
        for key in ("episodes", "max_steps"):
            if getattr(self, key) < 1:
                raise LeaderboardError(f"{key} must be >= 1, got {getattr(self, key)}")
        if self.history_length < 0:
            raise LeaderboardError(f"history_length must be >= 0, got {self.history_length}")

    @property
    def data(self) -> dict[str, Any]:
        """The spec as its JSON file has it (optional keys only where set)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.metadata.get("json", True)
                and not (f.name in _OPTIONAL and getattr(self, f.name) is None)}

    @property
    def digest(self) -> str:
        return digest(self.data)

    @property
    def prompt(self) -> PromptConfig:
        """The prompts of a policy that brings none of its own: the env's, with this spec's history."""
        return PromptConfig(history_length=self.history_length)


def check_spec(data: Any, where: str) -> Spec:
    """The ``Spec`` of a mapping; errors name the file, the key and the accepted values."""
    if not isinstance(data, dict):
        raise LeaderboardError(f"{where}: a spec must be a JSON object, got {type(data).__name__}")
    try:
        spec = from_mapping(Spec, data, what="spec key")
    except FieldError as e:
        raise LeaderboardError(f"{where}: {e}") from None
    object.__setattr__(spec, "path", where)
    return spec


def available_specs(specs_dir: str | Path = SPECS_DIR) -> dict[str, Path]:
    """Spec name -> file, for every ``*.json`` in ``specs_dir``."""
    folder = Path(specs_dir)
    return {p.stem: p for p in sorted(folder.glob("*.json"))} if folder.is_dir() else {}


def specs_of(env_id: str, specs_dir: str | Path = SPECS_DIR) -> list[str]:
    """The names of the specs that play ``env_id``."""
    return [name for name in available_specs(specs_dir) if load_spec(name, specs_dir).env_id == env_id]


def load_spec(name_or_path: str | Path, specs_dir: str | Path = SPECS_DIR) -> Spec:
    """A spec by file path or by name (``alfworld-valid_seen``); unknown names get close matches."""
    path = Path(name_or_path)
    if not path.is_file():
        known = available_specs(specs_dir)
        if str(name_or_path) not in known:
            prefixed = [n for n in known if n.startswith(str(name_or_path))]
            close = prefixed or difflib.get_close_matches(str(name_or_path), list(known), n=2)
            hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
            raise LeaderboardError(
                f"unknown leaderboard spec {str(name_or_path)!r}: not a file, and {specs_dir} has {sorted(known)}.{hint}"
            )
        path = known[str(name_or_path)]
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise LeaderboardError(f"{path}: not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})") from None
    return check_spec(data, str(path))


# -- results --------------------------------------------------------------------------
def load_schema() -> dict[str, Any]:
    if not SCHEMA_FILE.is_file():
        raise LeaderboardError(
            f"the result schema {SCHEMA_FILE} is missing: reinstall gigpo-gym, or point $GIGPO_GYM_BENCHMARKS at "
            "the benchmarks/ folder of a checkout"
        )
    return json.loads(SCHEMA_FILE.read_text())


def validate_result(result: Any, where: str = "result") -> None:
    """Raise ``LeaderboardError`` naming the field when ``result`` does not follow the schema."""
    import jsonschema
    validator = jsonschema.Draft202012Validator(load_schema())
    errors = sorted(validator.iter_errors(result), key=lambda e: list(e.absolute_path))
    if errors:
        first = errors[0]
        field_path = "/".join(str(p) for p in first.absolute_path) or "(top level)"
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise LeaderboardError(f"{where}: does not follow the result schema at {field_path}: {first.message}{more}")


def load_result(path: str | Path) -> dict[str, Any]:
    """Read and validate one result file."""
    path = Path(path)
    try:
        result = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise LeaderboardError(f"{path}: not valid JSON (line {e.lineno}: {e.msg})") from None
    validate_result(result, str(path))
    return result


def write_result(result: dict[str, Any], path: str | Path) -> Path:
    """Validate, then write atomically (temp file + ``os.replace``)."""
    validate_result(result, str(path))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, json.dumps(result, indent=1, sort_keys=True) + "\n")
    return path


def result_filename(result: dict[str, Any]) -> str:
    slug = "".join(c if c.isalnum() or c in "-_." else "_" for c in result["policy"]["name"]).strip("_")
    return f"{result['spec']['name']}__{slug}.json"
