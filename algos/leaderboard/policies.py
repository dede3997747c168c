"""Policy SPEC strings of ``gigpo-gym leaderboard --policy SPEC``.

``random`` (seeded random admissible action), ``random-search`` (the same, with
WebShop's ``search[<query>]`` filled with the instruction), ``expert`` (the env's own expert: the
upper bound), ``smollm2`` (the offline SmolLM2-135M-Instruct, zero-shot), a trainer
run folder / ``checkpoints`` folder / ``iter-NNNNNN`` checkpoint / the run's
``selected.safetensors`` (rebuilt from the run's ``config.yaml``, evaluated with the
prompts it was trained on), a folder
``HFPolicy.save`` wrote, a local Hugging Face model folder, a hub id that is already
in the local HF cache (nothing downloads), or ``sb3:PATH.zip`` (a Stable-Baselines3
model trained by ``benchmarks/train_sb3.py``), or ``openai:MODEL`` (a model behind an
OpenAI-compatible endpoint: ``base_url``, the key in the variable ``api_key_env``
names; ``policies.chat_api``).  ``template="paper"`` gives an LLM the GiGPO paper's
prompts (``wrappers.templates``) instead of the env's own.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from gigpo_gym.algos.leaderboard.specs import LeaderboardError
from gigpo_gym.algos.policies.base import SamplingParams

NAMED = ("random", "random-search", "expert", "smollm2")
#: The kinds that generate with an LLM (they take ``template`` and decoding settings).
LLM_KINDS = ("checkpoint", "hf", "smollm2", "api")
API_PREFIX = "openai:"


def _concrete_options(prompts, contexts, who: str) -> list[list[str]]:
    """Each row's admissible actions with ``<query>`` filled by its ``instruction`` (if any)."""
    from gigpo_gym.wrappers.sb3 import concrete_actions

    if contexts is None or len(contexts) != len(prompts):
        raise ValueError(f"{who} needs one context (admissible_actions, instruction) per prompt")
    return [concrete_actions(c.get("admissible_actions") or [], c.get("instruction")) for c in contexts]


class RandomConcretePolicy:
    """Random admissible action, with templated ones (WebShop's ``search[<query>]``) filled
    with the task's instruction: a random baseline that can reach a product at all."""

    needs_context = ("admissible_actions", "instruction")

    def __init__(self, seed: int = 0):
        import numpy as np

        self._rng = np.random.default_rng(seed)

    def generate(self, prompts, sampling, contexts=None):
        from gigpo_gym.algos.policies.base import Generation

        out = []
        for options in _concrete_options(prompts, contexts, "RandomConcretePolicy"):
            action = options[int(self._rng.integers(len(options)))] if options else ""
            out.append(Generation(text=f"<action>{action}</action>", prompt_ids=[], response_ids=[], log_probs=[]))
        return out


class ConcreteChoice:
    """An HF policy choosing among the admissible actions, templated ones filled first.

    WebShop's ``search[<query>]`` becomes ``search[<instruction>]`` (as for
    ``random-search``), so every candidate is one concrete command; ALFWorld's
    actions are concrete already and pass through unchanged.
    """

    needs_context = ("admissible_actions", "instruction")

    def __init__(self, policy: Any):
        self.policy = policy

    def generate(self, prompts, sampling, contexts=None):
        options = _concrete_options(prompts, contexts, "admissible choice")
        return self.policy.generate(prompts, sampling, [{**c, "admissible_actions": o} for c, o in zip(contexts, options)])


@dataclass
class LoadedPolicy:
    """A policy plus everything that decides how it is evaluated (recorded in the result)."""

    policy: Any
    spec: str
    kind: str
    name: str
    deterministic: bool
    sampling: SamplingParams
    #: Overrides of the prompt wrapper settings (history_length, intro, action_format; template="paper").
    prompt: dict[str, Any] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)
    #: How it ran, not what it computes (a server's address, concurrency): in the result, not in its config hash.
    runtime: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> dict[str, Any]:
        return {"spec": self.spec, "kind": self.kind, "name": self.name, "deterministic": self.deterministic,
                "details": {**self.details, "prompt": self.prompt}}

    def close(self) -> None:
        close = getattr(self.policy, "close", None)
        if close is not None:
            close()


def _command_env(env_id: str) -> bool:
    """True when the env's actions are plain commands in <action> tags (no tags of its own)."""
    from gymnasium.envs.registration import load_env_creator

    from gigpo_gym.registration import env_spec

    env_class = load_env_creator(env_spec(env_id).entry_point)
    return not getattr(env_class, "metadata", {}).get("action_tags")


#: Response budget with the paper's prompts, which reason in <think> first (the paper's max_response_length).
PAPER_MAX_NEW_TOKENS = 512


def _llm_sampling(env_id: str, temperature: float, max_new_tokens: int | None, seed: int, top_p: float = 1.0,
                  template: str = "default") -> SamplingParams:
    command = _command_env(env_id)
    default = PAPER_MAX_NEW_TOKENS if template == "paper" else (32 if command else 96)
    return SamplingParams(
        max_new_tokens=max_new_tokens or default, temperature=temperature, top_p=top_p,
        stop=("</action>",) if command else ("</search>", "</answer>"), seed=seed,
    )


@dataclass(frozen=True)
class ServerSettings:
    """How ``openai:MODEL`` reaches its server (``policies.chat_api.ChatAPIPolicy``)."""

    base_url: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    max_concurrency: int = 8
    max_retries: int = 5
    request_timeout: float = 120.0
    system_prompt: str | None = None
    #: First and longest wait between retries without Retry-After (seconds; doubled each time, with jitter).
    backoff: tuple[float, float] = (1.0, 60.0)


def resolve_policy(text: str, env_id: str, *, device: str = "auto", seed: int = 0, temperature: float | None = None,
                   max_new_tokens: int | None = None, name: str | None = None, choose_admissible: bool = False,
                   template: str = "default", top_p: float = 1.0, server: ServerSettings | None = None) -> LoadedPolicy:
    """The policy a SPEC string names, set up for ``env_id`` (errors say what was expected).

    ``choose_admissible`` makes an LLM policy answer with one of the admissible actions,
    picked by its own likelihoods (``HFPolicy(choose_admissible=True)``).  ``template``
    picks an LLM's prompts ("default": the env's own; "paper": the GiGPO paper's).
    ``openai:MODEL`` connects to its server here: a wrong key, model or address stops
    before any episode runs.
    """
    from gigpo_gym.wrappers.templates import PROMPT_TEMPLATES

    if template not in PROMPT_TEMPLATES:
        close = difflib.get_close_matches(str(template), PROMPT_TEMPLATES, n=1)
        raise LeaderboardError(f"prompt template {template!r} is not one of {list(PROMPT_TEMPLATES)}"
                               + (f"; did you mean {close[0]!r}?" if close else ""))
    text = str(text).strip()
    if text.startswith(API_PREFIX):
        loaded = _load_api(text, env_id, server or ServerSettings(), seed, temperature, max_new_tokens, top_p, name,
                           template)
    else:
        loaded = _resolve(text, env_id, device=device, seed=seed, temperature=temperature,
                          max_new_tokens=max_new_tokens, name=name, template=template, top_p=top_p)
    if template != "default":
        if loaded.kind not in LLM_KINDS:
            raise LeaderboardError(f"--prompt {template} is for LLM policies; {loaded.spec!r} is a {loaded.kind} policy")
        loaded = replace(loaded, prompt={**loaded.prompt, "template": template},
                         name=loaded.name if name is not None else f"{loaded.name}, {template} prompt")
    return _choosing(loaded, env_id, custom_name=name is not None) if choose_admissible else loaded


def _load_api(text: str, env_id: str, server: ServerSettings, seed: int, temperature: float | None,
              max_new_tokens: int | None, top_p: float, name: str | None, template: str) -> LoadedPolicy:
    from gigpo_gym.algos.policies.chat_api import ChatAPIPolicy

    model = text[len(API_PREFIX):].strip()
    if not model:
        raise LeaderboardError("openai:MODEL needs the model name the server knows, e.g. openai:gpt-4o")
    try:
        policy = ChatAPIPolicy(model, base_url=server.base_url, api_key_env=server.api_key_env,
                               max_concurrency=server.max_concurrency, max_retries=server.max_retries,
                               request_timeout=server.request_timeout, system_prompt=server.system_prompt,
                               backoff=server.backoff)
    except ValueError as e:
        raise LeaderboardError(str(e)) from None
    temp = 0.0 if temperature is None else float(temperature)
    sampling = _llm_sampling(env_id, temp, max_new_tokens, seed, top_p, template)
    try:
        served = policy.connect(sampling)
    except BaseException:
        policy.close()
        raise
    label = name or f"{model.rsplit('/', 1)[-1] if model.startswith('/') else model} (served)"
    details = {"model": model, "served_model": served["model"], "system_prompt": server.system_prompt}
    runtime = {k: v for k, v in policy.describe().items() if k not in details}
    return LoadedPolicy(policy, text, "api", label, temp == 0.0, sampling, details=details, runtime=runtime)


def _choosing(loaded: LoadedPolicy, env_id: str, custom_name: bool) -> LoadedPolicy:
    from gigpo_gym.algos.policies.hf import HFPolicy

    if not isinstance(loaded.policy, HFPolicy):
        raise LeaderboardError(f"--choose-admissible is for LLM policies; {loaded.spec!r} is a {loaded.kind} policy")
    if not _command_env(env_id):
        raise LeaderboardError(f"--choose-admissible needs admissible actions; {env_id} has an open action space")
    loaded.policy.choose_admissible = True
    name = loaded.name if custom_name else f"{loaded.name}, admissible choice"
    return replace(loaded, policy=ConcreteChoice(loaded.policy), name=name,
                   details={**loaded.details, "choose_admissible": True})


def _resolve(text: str, env_id: str, *, device: str, seed: int, temperature: float | None,
             max_new_tokens: int | None, name: str | None, template: str = "default", top_p: float = 1.0) -> LoadedPolicy:
    from gigpo_gym.algos.policies.reference import ExpertPolicy, RandomAdmissiblePolicy

    neutral = SamplingParams(max_new_tokens=1, temperature=0.0)
    if text == "random":
        return LoadedPolicy(RandomAdmissiblePolicy(seed=seed), text, "random", name or "random admissible", True,
                            neutral, details={"seed": seed})
    if text == "random-search":
        return LoadedPolicy(RandomConcretePolicy(seed=seed), text, "random", name or "random admissible, instruction search",
                            True, neutral, details={"seed": seed})
    if text == "expert":
        return LoadedPolicy(ExpertPolicy(), text, "expert", name or "expert (upper bound)", True, neutral)
    if text.startswith("sb3:"):
        from gigpo_gym.wrappers.sb3 import SB3Policy

        path = Path(text[4:])
        if not path.is_file():
            raise LeaderboardError(f"SB3 model {str(path)!r} does not exist (train one with benchmarks/train_sb3.py)")
        policy = SB3Policy.load(path, device="cpu")
        return LoadedPolicy(policy, text, "sb3", name or f"SB3 {policy.algo_name} {policy.settings.get('timesteps', 0) // 1000}k steps (hashed text)",
                            True, neutral, details=policy.describe())
    temp = 0.0 if temperature is None else float(temperature)
    if text == "smollm2":
        from gigpo_gym.algos.policies.hf import HFPolicy
        from gigpo_gym.algos.policies.smollm import smollm2_path

        prefix = "<action>" if _command_env(env_id) and template == "default" else ""
        policy = HFPolicy.from_pretrained(smollm2_path(), device=device, response_prefix=prefix,
                                          max_prompt_tokens=1024 if template == "default" else 8192)
        return LoadedPolicy(policy, text, "smollm2", name or "SmolLM2-135M-Instruct zero-shot", temp == 0.0,
                            _llm_sampling(env_id, temp, max_new_tokens, seed, top_p, template),
                            details={"response_prefix": prefix})
    path = Path(text).expanduser()
    if path.exists():
        checkpoint = _find_checkpoint(path)
        if checkpoint is not None:
            return _load_checkpoint(checkpoint, text, env_id, device, seed, temperature, max_new_tokens, name)
        return _load_hf_folder(path, text, env_id, device, seed, temp, max_new_tokens, name, template, top_p)
    looks_like_path = text.startswith((".", "/", "~")) or text.count("/") != 1
    if looks_like_path:
        close = difflib.get_close_matches(text, NAMED, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise LeaderboardError(
            f"policy {text!r}: no such checkpoint or model folder, and not one of {list(NAMED)}, 'sb3:PATH', "
            f"'{API_PREFIX}MODEL' or a hub id (org/name).{hint}"
        )
    return _load_hub(text, env_id, device, seed, temp, max_new_tokens, name, template, top_p)


def _find_checkpoint(path: Path) -> tuple[Path, Path] | None:
    """(checkpoint folder, run folder) when ``path`` is a trainer run, its checkpoints or one checkpoint."""
    from gigpo_gym.algos.training import checkpoint as ckpt
    from gigpo_gym.algos.training.trainer import SELECTED_FILE

    if path.is_file() and path.name == SELECTED_FILE:  # select_every's chosen weights
        return path, path.parent
    if (path / ckpt.MANIFEST_FILE).is_file() or (path / ckpt.POLICY_FILE).is_file():
        return path, path.parent.parent
    if (path / ckpt.LATEST_FILE).is_file():
        return ckpt.latest_checkpoint(path), path.parent
    if (path / "checkpoints").is_dir():
        if not (path / "checkpoints" / ckpt.LATEST_FILE).is_file():
            raise LeaderboardError(f"run folder {path} has no complete checkpoint ({path / 'checkpoints' / 'latest'} is missing)")
        return ckpt.latest_checkpoint(path / "checkpoints"), path
    return None


def _load_checkpoint(found, text, env_id, device, seed, temperature, max_new_tokens, name) -> LoadedPolicy:
    from gigpo_gym.algos.training import checkpoint as ckpt
    from gigpo_gym.algos.training.config import ConfigError, load_config
    from gigpo_gym.algos.training.trainer import build_policy, prompt_settings

    folder, run_dir = found
    config_file = run_dir / "config.yaml"
    if not config_file.is_file():
        raise LeaderboardError(f"checkpoint {folder}: the run's {config_file} is missing, so the model cannot be rebuilt")
    try:
        cfg = load_config(config_file, [f"model.device={device}"])
        policy = build_policy(cfg)
        state = _load_selected_file(folder, policy) if folder.is_file() else ckpt.load_checkpoint(folder, policy)
    except (ConfigError, ckpt.CheckpointError) as e:
        raise LeaderboardError(f"checkpoint {folder}: {e}") from e
    s = cfg.sampling
    temp = s.eval_temperature if temperature is None else float(temperature)
    sampling = SamplingParams(max_new_tokens=max_new_tokens or s.max_new_tokens, temperature=temp, stop=tuple(s.stop),
                              seed=seed)
    prompt = prompt_settings(cfg)
    iteration = int(state.get("iteration", 0))
    # iteration 0 holds the weights before any RL iteration: the algorithm never touched them
    trained_by = cfg.algo.name if iteration > 0 else ("sft" if cfg.sft.steps > 0 else "none")
    details = {"checkpoint": str(folder), "iteration": iteration, "algo": trained_by,
               "model": cfg.model.name, "trained_on": cfg.env.id, "config_digest": state.get("config_digest")}
    if cfg.env.id != env_id:
        details["warning"] = f"trained on {cfg.env.id}, evaluated on {env_id}"
    label = name or f"{cfg.model.name} + {trained_by} ({run_dir.name}, iter {iteration})"
    return LoadedPolicy(policy, text, "checkpoint", label, temp == 0.0, sampling, prompt, details)


def _load_selected_file(path: Path, policy: Any) -> dict[str, Any]:
    """Load a run's ``selected.safetensors``; its trainer state is the iteration the file records."""
    from safetensors.torch import load_model

    from gigpo_gym.algos.training.trainer import read_selected

    try:
        load_model(policy, str(path))
        return {"iteration": (read_selected(path) or {"iteration": 0})["iteration"]}
    except Exception as e:  # safetensors raises several types on damaged or mismatched files
        raise LeaderboardError(f"cannot load {path} into the run's model: {e}") from e


def _load_hf_folder(path: Path, text, env_id, device, seed, temp, max_new_tokens, name, template="default",
                    top_p=1.0) -> LoadedPolicy:
    from gigpo_gym.algos.policies.hf import HFPolicy

    if (path / "policy.json").is_file():
        policy = HFPolicy.load(path, device=device)
    elif (path / "config.json").is_file():
        prefix = "<action>" if _command_env(env_id) and template == "default" else ""
        # the paper's prompts are long (history, actions); a served model reads them whole too
        policy = HFPolicy.from_pretrained(path, device=device, response_prefix=prefix,
                                          max_prompt_tokens=2048 if template == "default" else 8192)
    else:
        raise LeaderboardError(
            f"policy folder {path} is neither a trainer checkpoint (manifest.json / checkpoints/latest), a saved "
            "policy (policy.json) nor a Hugging Face model folder (config.json)"
        )
    return LoadedPolicy(policy, text, "hf", name or f"{path.name} zero-shot", temp == 0.0,
                        _llm_sampling(env_id, temp, max_new_tokens, seed, top_p, template), details={"path": str(path)})


def _load_hub(repo_id: str, env_id, device, seed, temp, max_new_tokens, name, template="default",
              top_p=1.0) -> LoadedPolicy:
    try:
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import LocalEntryNotFoundError
    except ImportError as e:  # pragma: no cover - comes with transformers
        from gigpo_gym.registration import missing_extra_error

        raise missing_extra_error("train", "Hugging Face hub models") from e
    try:
        local = Path(snapshot_download(repo_id, local_files_only=True))
    except (LocalEntryNotFoundError, OSError, ValueError) as e:
        raise LeaderboardError(
            f"policy {repo_id!r}: no such local folder or checkpoint, and as a hub id it is not in the local "
            f"Hugging Face cache (nothing is downloaded at run time; fetch it beforehand with "
            f"`hf download {repo_id}`, or pass a local folder)"
        ) from e
    loaded = _load_hf_folder(local, repo_id, env_id, device, seed, temp, max_new_tokens, name or f"{repo_id} zero-shot",
                             template, top_p)
    return replace(loaded, details={"hub_id": repo_id, "path": str(local)})
