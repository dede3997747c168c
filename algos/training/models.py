"""The policy a training config describes.

``build_policy`` is what the trainer trains and what the leaderboard rebuilds from a
run folder's ``config.yaml`` before loading its weights, so both get the same model,
reading its prompts as the run's ``prompt`` section says (``PromptConfig.input_format``).
"""

from __future__ import annotations

from gigpo_gym.algos.training.config import TrainConfig
from gigpo_gym.core.env import derive_seed


def build_policy(cfg: TrainConfig, device: str | None = None):
    """The configured HF policy ('tiny' is built from the env's expert text, 'smollm2' offline)."""
    from gigpo_gym.algos.policies.hf import HFPolicy

    m = cfg.model
    kwargs = {**m.policy_kwargs(device), "input_format": cfg.prompt.input_format(),
              "critic": cfg.algo.build().needs_critic, "sampling_seed": cfg.seed}
    if m.name == "tiny":
        from gigpo_gym.algos.policies.tiny import TinySpec, build_tiny
        from gigpo_gym.algos.training.sft import expert_demonstrations

        demos = expert_demonstrations(
            cfg.env.id, m.tiny.corpus_episodes, seed=derive_seed(cfg.seed, 7), env_kwargs=cfg.env_kwargs("train"),
            wrapper=cfg.wrapper(), expert_kwargs=cfg.sft.expert_kwargs,
        )
        corpus = [text for pair in demos for text in pair]
        spec = TinySpec(m.tiny.vocab_size, m.tiny.hidden_size, m.tiny.intermediate_size, m.tiny.num_layers, seed=cfg.seed,
                        pieces=m.tiny.pieces)
        return HFPolicy.from_pretrained(build_tiny(corpus, spec), **kwargs)
    if m.name == "smollm2":
        from gigpo_gym.algos.policies.smollm import smollm2_path

        return HFPolicy.from_pretrained(smollm2_path(), **kwargs)
    return HFPolicy.from_pretrained(m.name, **kwargs)
