"""Policy SPEC strings of ``gigpo-gym leaderboard --policy SPEC``: a registry of loaders.

A SPEC is a registered name (``random``, ``random-search``, ``expert``, ``smollm2``), a
registered prefix with its argument (``sb3:PATH.zip``, ``openai:MODEL``), or a path or
hub id:

- ``random``: a seeded random admissible action; ``random-search``: the same, with
  WebShop's ``search[<query>]`` filled with the instruction; ``expert``: the env's own
  expert (the upper bound); ``smollm2``: the offline SmolLM2-135M-Instruct, zero-shot;
- ``sb3:PATH.zip``: a Stable-Baselines3 model (``benchmarks/train_sb3.py``);
  ``openai:MODEL``: a model behind an OpenAI-compatible endpoint (``policies.chat_api``);
- a trainer run folder, its ``checkpoints`` folder, one ``iter-NNNNNN`` checkpoint or its
  ``selected.safetensors``: rebuilt from the run's ``config.yaml`` and evaluated on the
  run's own prompts (its ``PromptConfig``, observation mode included); a folder
  ``HFPolicy.save`` wrote, a local Hugging Face model folder, or a hub id already in the
  local HF cache (nothing downloads).

A loader is a function ``PolicyRequest -> LoadedPolicy``.  ``register_policy_loader("myserver",
load)`` makes ``--policy myserver:ARG`` (and ``myserver``) call it; a package can do the
same without being imported first, through an entry point of the group
``gigpo_gym.policies`` (``myserver = my_pkg.mod:load``), as estimators do.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field, replace
from importlib import metadata
from pathlib import Path
from typing import Any, Callable

from gigpo_gym.algos.leaderboard.specs import LeaderboardError, Spec
from gigpo_gym.algos.policies.base import Policy, SamplingParams
from gigpo_gym.wrappers.stack import PROMPT_TEMPLATES, InputFormat, PromptConfig

ENTRY_POINT_GROUP = "gigpo_gym.policies"
#: The kinds that generate with an LLM (they take ``template`` and decoding settings).
LLM_KINDS = ("checkpoint", "hf", "smollm2", "api")
API_PREFIX = "openai:"
#: Response budget with the paper's prompts, which reason in <think> first (the paper's max_response_length).
PAPER_MAX_NEW_TOKENS = 512
#: Response budget of one reply in the tools prompt's chat (free text, then tool calls, then the end of turn).
TOOLS_MAX_NEW_TOKENS = 256


# -- what a loader gets and gives -------------------------------------------------------
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


@dataclass(frozen=True)
class PolicyRequest:
    """What ``--policy SPEC`` and its options ask for: a loader's one argument."""

    #: The SPEC string as given.
    text: str
    #: The env the policy is evaluated on.
    env_id: str
    #: What follows ``name:`` in the SPEC ("" for a bare name, a path or a hub id).
    argument: str = ""
    device: str = "auto"
    seed: int = 0
    #: Sampling temperature (None: greedy, or a run's own evaluation temperature).
    temperature: float | None = None
    max_new_tokens: int | None = None
    top_p: float = 1.0
    #: The name shown on the board (None: the loader's).
    name: str | None = None
    #: The prompt template of an LLM ("default": the env's own, or a run's; "paper": the GiGPO paper's; "tools":
    #: TRL's tool-calling conversation).
    template: str = "default"
    #: An LLM answers with one of the admissible actions, chosen by its own likelihoods.
    choose_admissible: bool = False
    server: ServerSettings = field(default_factory=ServerSettings)

    @property
    def llm_temperature(self) -> float:
        return 0.0 if self.temperature is None else float(self.temperature)


@dataclass
class LoadedPolicy:
    """A policy plus everything that decides how it is evaluated (recorded in the result)."""

    policy: Policy
    spec: str
    kind: str
    name: str
    deterministic: bool
    sampling: SamplingParams
    #: The prompts it is evaluated on when it brings its own (a trainer run's); None: the spec's, in ``template``.
    prompt: PromptConfig | None = None
    details: dict[str, Any] = field(default_factory=dict)
    #: How it ran, not what it computes (a server's address, concurrency): in the result, not in its config hash.
    runtime: dict[str, Any] = field(default_factory=dict)
    #: The prompt template of a policy without prompts of its own.
    template: str = "default"
    #: A run's anchor mode, recorded with its prompts.
    anchor_mode: str = "state"
    #: ``PromptConfig`` fields the template reads beside the spec's (the tools prompt's cut of tool results).
    template_settings: dict[str, Any] = field(default_factory=dict)

    def prompt_for(self, spec: Spec) -> PromptConfig:
        """The prompts this policy sees on ``spec``: its own, else the spec's in its template."""
        if self.prompt is not None:
            return self.prompt
        return _in_template(spec.prompt, self.template, self.template_settings)

    def prompt_record(self) -> dict[str, Any]:
        """How the result names the prompts (part of the config hash): a run's settings, or the template if not the env's."""
        if self.prompt is None:
            return {} if self.template == "default" else {"template": self.template, **self.template_settings}
        p = self.prompt
        record = {"history_length": p.history_length, "anchor_mode": self.anchor_mode, "intro": p.intro,
                  "action_format": p.action_format, "task_key": p.task_key, "list_actions": p.list_actions}
        kept = ("template", "observation_mode", "max_observation_tokens", "observation_tokenizer", "system_prompt",
                "response_prefix", "chat_template")
        return {**record, **{k: v for k, v in p.record().items() if k in kept}}

    def describe(self) -> dict[str, Any]:
        return {"spec": self.spec, "kind": self.kind, "name": self.name, "deterministic": self.deterministic,
                "details": {**self.details, "prompt": self.prompt_record()}}

    def close(self) -> None:
        self.policy.close()


# -- the registry ------------------------------------------------------------------------
Loader = Callable[[PolicyRequest], LoadedPolicy]
#: Name -> loader: ``--policy NAME`` and ``--policy NAME:ARGUMENT`` call it.
POLICY_LOADERS: dict[str, Loader] = {}


def register_policy_loader(name: str, loader: Loader | None = None) -> Any:
    """Make ``--policy NAME`` / ``NAME:ARGUMENT`` load through ``loader``; without ``loader``, a decorator."""
    if not name or ":" in name or "/" in name:
        raise ValueError(f"a policy loader's name has no ':' or '/', got {name!r}")

    def register(target: Loader) -> Loader:
        POLICY_LOADERS[name] = target
        return target

    return register if loader is None else register(loader)


def _loader_for(text: str) -> tuple[Loader, str] | None:
    """The loader a SPEC names and its argument: a registered name, else an entry point's."""
    name, sep, argument = text.partition(":")
    if name not in POLICY_LOADERS:
        found = [ep for ep in metadata.entry_points(group=ENTRY_POINT_GROUP) if ep.name == name]
        if not found:
            return None
        register_policy_loader(name, found[0].load())
    return POLICY_LOADERS[name], argument


def resolve_policy(text: str, env_id: str, *, device: str = "auto", seed: int = 0, temperature: float | None = None,
                   max_new_tokens: int | None = None, name: str | None = None, choose_admissible: bool = False,
                   template: str = "default", top_p: float = 1.0, server: ServerSettings | None = None,
                   max_observation_tokens: int | None = None) -> LoadedPolicy:
    """The policy a SPEC string names, set up for ``env_id`` (errors say what was expected).

    ``choose_admissible`` makes an LLM policy answer with one of the admissible actions,
    picked by its own likelihoods (``HFPolicy(choose_admissible=True)``).  ``template``
    picks an LLM's prompts ("default": the env's own, or a run's; "paper": the GiGPO
    paper's; "tools": TRL's tool-calling conversation, for a policy that answers chats,
    ``Policy.needs_context``).  With "tools", ``max_observation_tokens`` cuts tool results
    as in training, counted in the tokens of a Hugging Face model folder's tokenizer (UTF-8
    bytes for other policies).  ``openai:MODEL`` connects to its server here: a wrong key,
    model or address stops before any episode runs.
    """
    if template not in PROMPT_TEMPLATES:
        close = difflib.get_close_matches(str(template), list(PROMPT_TEMPLATES), n=1)
        raise LeaderboardError(f"prompt template {template!r} is not one of {list(PROMPT_TEMPLATES)}"
                               + (f"; did you mean {close[0]!r}?" if close else ""))
    if max_observation_tokens is not None and template != "tools":
        raise LeaderboardError("--max-observation-tokens cuts the tool results of --prompt tools; "
                               f"the {template!r} prompt has none")
    if template == "tools" and choose_admissible:
        raise LeaderboardError("--choose-admissible answers prompts with an admissible action; --prompt tools asks "
                               "for tool calls: use one or the other")
    text = str(text).strip()
    request = PolicyRequest(text, env_id, device=device, seed=seed, temperature=temperature,
                            max_new_tokens=max_new_tokens, top_p=top_p, name=name, template=template,
                            choose_admissible=choose_admissible, server=server or ServerSettings())
    found = _loader_for(text)
    if found is not None:
        loader, argument = found
        loaded = loader(replace(request, argument=argument))
    else:
        loaded = _load_path_or_hub(request)
    if template != "default":
        if loaded.kind not in LLM_KINDS:
            loaded.close()
            raise LeaderboardError(f"--prompt {template} is for LLM policies; {loaded.spec!r} is not one (its kind: "
                                   f"{loaded.kind})")
        if template == "tools" and "messages" not in loaded.policy.needs_context:
            loaded.close()
            raise LeaderboardError(f"--prompt tools plays a chat with tool calls, and {loaded.spec!r} (a {loaded.kind} "
                                   "policy) answers prompt strings only (its needs_context has no 'messages')")
        settings = _tools_settings(loaded, max_observation_tokens) if template == "tools" else {}
        label = loaded.name if name is not None else f"{loaded.name}, {template} prompt"
        prompt = None if loaded.prompt is None else _in_template(loaded.prompt, template, settings)
        loaded = replace(loaded, template=template, prompt=prompt, name=label, template_settings=settings)
    return _choosing(loaded, env_id, custom_name=name is not None) if choose_admissible else loaded


def _in_template(prompt: PromptConfig, template: str, settings: dict[str, Any] | None = None) -> PromptConfig:
    """``prompt`` in another template, keeping only what that template reads, with ``settings`` on top."""
    reads = PROMPT_TEMPLATES[template].reads
    kept = {k: v for k, v in prompt.record().items() if k in reads and k != "template"}
    return PromptConfig(template=template, **{**kept, **(settings or {})})


def _tools_settings(loaded: LoadedPolicy, max_observation_tokens: int | None) -> dict[str, Any]:
    """The tools prompt's cut: ``max_observation_tokens`` of a model folder's own tokenizer (TRL's recipe cuts in
    the policy's tokens), else UTF-8 bytes."""
    settings: dict[str, Any] = {}
    if max_observation_tokens is not None:
        if isinstance(max_observation_tokens, bool) or not isinstance(max_observation_tokens, int) \
                or max_observation_tokens < 16:
            raise LeaderboardError(f"--max-observation-tokens must be an integer >= 16, got {max_observation_tokens!r}")
        settings["max_observation_tokens"] = max_observation_tokens
    if loaded.kind == "hf" and loaded.details.get("path"):
        settings["observation_tokenizer"] = str(loaded.details["path"])
    return settings


# -- the built-in loaders ----------------------------------------------------------------
_NEUTRAL = SamplingParams(max_new_tokens=1, temperature=0.0)


@register_policy_loader("random")
def _random(req: PolicyRequest) -> LoadedPolicy:
    from gigpo_gym.algos.policies.reference import RandomAdmissiblePolicy

    return LoadedPolicy(RandomAdmissiblePolicy(seed=req.seed), req.text, "random", req.name or "random admissible", True,
                        _NEUTRAL, details={"seed": req.seed})


@register_policy_loader("random-search")
def _random_search(req: PolicyRequest) -> LoadedPolicy:
    from gigpo_gym.algos.policies.concrete import RandomConcretePolicy

    return LoadedPolicy(RandomConcretePolicy(seed=req.seed), req.text, "random",
                        req.name or "random admissible, instruction search", True, _NEUTRAL, details={"seed": req.seed})


@register_policy_loader("expert")
def _expert(req: PolicyRequest) -> LoadedPolicy:
    from gigpo_gym.algos.policies.reference import ExpertPolicy

    return LoadedPolicy(ExpertPolicy(), req.text, "expert", req.name or "expert (upper bound)", True, _NEUTRAL)


@register_policy_loader("sb3")
def _sb3(req: PolicyRequest) -> LoadedPolicy:
    from gigpo_gym.algos.policies.sb3 import SB3Policy

    path = Path(req.argument)
    if not path.is_file():
        raise LeaderboardError(f"SB3 model {str(path)!r} does not exist (train one with benchmarks/train_sb3.py)")
    policy = SB3Policy.load(path, device="cpu")
    label = req.name or f"SB3 {policy.algo_name} {policy.settings.get('timesteps', 0) // 1000}k steps (hashed text)"
    return LoadedPolicy(policy, req.text, "sb3", label, True, _NEUTRAL, details=policy.describe())


@register_policy_loader("smollm2")
def _smollm2(req: PolicyRequest) -> LoadedPolicy:
    from gigpo_gym.algos.policies.hf import HFPolicy
    from gigpo_gym.algos.policies.smollm import smollm2_path

    prefix = "<action>" if _command_env(req.env_id) and req.template == "default" else ""
    policy = HFPolicy.from_pretrained(smollm2_path(), device=req.device, input_format=InputFormat(response_prefix=prefix),
                                      max_prompt_tokens=1024 if req.template == "default" else _long_prompts(
                                          smollm2_path(), req),
                                      choose_admissible=req.choose_admissible)
    return LoadedPolicy(policy, req.text, "smollm2", req.name or "SmolLM2-135M-Instruct zero-shot",
                        req.llm_temperature == 0.0, _llm_sampling(req), details={"response_prefix": prefix})


@register_policy_loader("openai")
def _served(req: PolicyRequest) -> LoadedPolicy:
    from gigpo_gym.algos.policies.chat_api import ChatAPIPolicy

    model, server = req.argument.strip(), req.server
    if not model:
        raise LeaderboardError("openai:MODEL needs the model name the server knows, e.g. openai:gpt-4o")
    try:
        policy = ChatAPIPolicy(model, base_url=server.base_url, api_key_env=server.api_key_env,
                               max_concurrency=server.max_concurrency, max_retries=server.max_retries,
                               request_timeout=server.request_timeout, system_prompt=server.system_prompt,
                               backoff=server.backoff)
    except ValueError as e:
        raise LeaderboardError(str(e)) from None
    sampling = _llm_sampling(req)
    try:
        served = policy.connect(sampling)
    except BaseException:
        policy.close()
        raise
    label = req.name or f"{model.rsplit('/', 1)[-1] if model.startswith('/') else model} (served)"
    details = {"model": model, "served_model": served["model"], "system_prompt": server.system_prompt}
    runtime = {k: v for k, v in policy.describe().items() if k not in details}
    return LoadedPolicy(policy, req.text, "api", label, req.llm_temperature == 0.0, sampling, details=details,
                        runtime=runtime)


def _load_path_or_hub(req: PolicyRequest) -> LoadedPolicy:
    """A run folder or checkpoint, a saved policy, a Hugging Face model folder, or a cached hub id."""
    from gigpo_gym.algos.training.checkpoint import CheckpointError, RunFolder

    path = Path(req.text).expanduser()
    if path.exists():
        try:
            found = RunFolder.locate(path)
        except CheckpointError as e:
            raise LeaderboardError(str(e)) from None
        return _load_run(req, *found) if found is not None else _load_hf_folder(req, path)
    looks_like_path = req.text.startswith((".", "/", "~")) or req.text.count("/") != 1
    if looks_like_path:
        known = sorted(POLICY_LOADERS)
        close = difflib.get_close_matches(req.text, known, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise LeaderboardError(
            f"policy {req.text!r}: no such checkpoint or model folder, and not one of {known} (or NAME:ARGUMENT of "
            f"'sb3:PATH', '{API_PREFIX}MODEL') or a hub id (org/name).{hint}"
        )
    return _load_hub(req)


def _load_run(req: PolicyRequest, run: Any, weights: Path) -> LoadedPolicy:
    """A trainer run's weights in the run's own model, with its prompts, observation mode and decoding."""
    from gigpo_gym.algos.training.checkpoint import CheckpointError
    from gigpo_gym.algos.training.config import ConfigError
    from gigpo_gym.algos.training.models import build_policy

    overrides = [f"model.device={req.device}"] + (["model.choose_admissible=true"] if req.choose_admissible else [])
    try:
        cfg = run.config(overrides)
    except (ConfigError, CheckpointError) as e:
        raise LeaderboardError(f"checkpoint {weights}: {e}") from e
    if cfg.env.id != req.env_id:  # its prompts, observations and actions are another env's
        from gigpo_gym.algos.leaderboard.specs import specs_of

        raise LeaderboardError(f"{run.path} was trained on {cfg.env.id}, and this spec plays {req.env_id}: evaluate it "
                               f"on a spec of {cfg.env.id} ({', '.join(specs_of(cfg.env.id)) or 'none is shipped'})")
    try:
        policy = build_policy(cfg)
        state = run.load_weights(weights, policy)
    except (ConfigError, CheckpointError) as e:
        raise LeaderboardError(f"checkpoint {weights}: {e}") from e
    s = cfg.sampling
    sampling = replace(s.params(evaluation=True, seed=req.seed), max_new_tokens=req.max_new_tokens or s.max_new_tokens,
                       temperature=s.eval_temperature if req.temperature is None else float(req.temperature))
    iteration = int(state.get("iteration", 0))
    # iteration 0 holds the weights before any RL iteration: the algorithm never touched them
    trained_by = cfg.algo.name if iteration > 0 else ("sft" if cfg.sft.steps > 0 else "none")
    details = {"checkpoint": str(weights), "iteration": iteration, "algo": trained_by,
               "model": cfg.model.name, "trained_on": cfg.env.id, "config_digest": state.get("config_digest")}
    label = req.name or f"{cfg.model.name} + {trained_by} ({run.path.name}, iter {iteration})"
    return LoadedPolicy(policy, req.text, "checkpoint", label, sampling.temperature == 0.0, sampling, cfg.prompt,
                        details, anchor_mode=cfg.env.anchor_mode)


def _load_hf_folder(req: PolicyRequest, path: Path, kind_details: dict[str, Any] | None = None) -> LoadedPolicy:
    from gigpo_gym.algos.policies.hf import HFPolicy

    if (path / "policy.json").is_file():
        policy = HFPolicy.load(path, device=req.device, choose_admissible=req.choose_admissible or None)
    elif (path / "config.json").is_file():
        prefix = "<action>" if _command_env(req.env_id) and req.template == "default" else ""
        # the paper's prompts are long (history, actions); a served model reads them whole too
        policy = HFPolicy.from_pretrained(path, device=req.device, input_format=InputFormat(response_prefix=prefix),
                                          max_prompt_tokens=2048 if req.template == "default" else _long_prompts(
                                              path, req),
                                          choose_admissible=req.choose_admissible)
    else:
        raise LeaderboardError(
            f"policy folder {path} is neither a trainer checkpoint (manifest.json / checkpoints/latest), a saved "
            "policy (policy.json) nor a Hugging Face model folder (config.json)"
        )
    return LoadedPolicy(policy, req.text, "hf", req.name or f"{path.name} zero-shot", req.llm_temperature == 0.0,
                        _llm_sampling(req), details=kind_details or {"path": str(path)})


def _load_hub(req: PolicyRequest) -> LoadedPolicy:
    try:
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import LocalEntryNotFoundError
    except ImportError as e:  # pragma: no cover - comes with transformers
        from gigpo_gym.core.extras import missing_extra_error

        raise missing_extra_error("train", "Hugging Face hub models") from e
    try:
        local = Path(snapshot_download(req.text, local_files_only=True))
    except (LocalEntryNotFoundError, OSError, ValueError) as e:
        raise LeaderboardError(
            f"policy {req.text!r}: no such local folder or checkpoint, and as a hub id it is not in the local "
            f"Hugging Face cache (nothing is downloaded at run time; fetch it beforehand with "
            f"`hf download {req.text}`, or pass a local folder)"
        ) from e
    return _load_hf_folder(replace(req, name=req.name or f"{req.text} zero-shot"), local,
                           {"hub_id": req.text, "path": str(local)})


# -- what the loaders share --------------------------------------------------------------
def _command_env(env_id: str) -> bool:
    """True when the env's actions are plain commands in <action> tags (no tags of its own)."""
    from gymnasium.envs.registration import load_env_creator

    from gigpo_gym.registration import env_spec

    env_class = load_env_creator(env_spec(env_id).entry_point)
    return not getattr(env_class, "metadata", {}).get("action_tags")


def _long_prompts(model: Path, req: PolicyRequest) -> int:
    """Prompt tokens a long template (paper, tools) may use: 8192, or less where the model's positions end
    sooner, leaving room for the reply."""
    from transformers import AutoConfig

    positions = getattr(AutoConfig.from_pretrained(str(model)), "max_position_embeddings", None)
    return min(8192, positions - _llm_sampling(req).max_new_tokens) if positions else 8192


def _llm_sampling(req: PolicyRequest) -> SamplingParams:
    command = _command_env(req.env_id)
    if req.template == "tools":  # a reply ends at its end of turn, as in TRL: no stop strings
        return SamplingParams(max_new_tokens=req.max_new_tokens or TOOLS_MAX_NEW_TOKENS,
                              temperature=req.llm_temperature, top_p=req.top_p, seed=req.seed)
    default = PAPER_MAX_NEW_TOKENS if req.template == "paper" else (32 if command else 96)
    return SamplingParams(
        max_new_tokens=req.max_new_tokens or default, temperature=req.llm_temperature, top_p=req.top_p,
        stop=("</action>",) if command else ("</search>", "</answer>"), seed=req.seed,
    )


def _choosing(loaded: LoadedPolicy, env_id: str, custom_name: bool) -> LoadedPolicy:
    from gigpo_gym.algos.policies.concrete import ConcreteChoice
    from gigpo_gym.algos.policies.hf import HFPolicy

    if not isinstance(loaded.policy, HFPolicy):
        raise LeaderboardError(f"--choose-admissible is for LLM policies; {loaded.spec!r} is not one (its kind: "
                               f"{loaded.kind})")
    if not _command_env(env_id):
        raise LeaderboardError(f"--choose-admissible needs admissible actions; {env_id} has an open action space")
    name = loaded.name if custom_name else f"{loaded.name}, admissible choice"
    return replace(loaded, policy=ConcreteChoice(loaded.policy), name=name,
                   details={**loaded.details, "choose_admissible": True})
