"""A tiny model that already writes an env's tool calls, to try the TRL integration offline in a minute or two.

``tiny_tool_model(env_id, folder)`` builds a small Qwen2 with a BPE tokenizer trained on
the expert's tool-calling conversations (``trl.expert_conversations``), makes the
template's fixed strings single tokens, and fine-tunes it on those conversations with
TRL's ``SFTTrainer``.  It plays badly, but its replies are tool calls, so a rollout
steps the env.  The examples and the tests use it; nothing is downloaded.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gigpo_gym.wrappers.chat import TOOL_CHAT_TEMPLATE
from gigpo_gym.integrations.trl import expert_conversations, with_tool_template

#: Its observations are cut to this many UTF-8 bytes (it has no tokenizer while its data is made).
TINY_OBSERVATION_BYTES = 48


def _rendered(messages: list[dict], tools: list[dict]) -> str:
    from transformers.utils.chat_template_utils import render_jinja_template

    rendered, _ = render_jinja_template(conversations=[messages], tools=tools, chat_template=TOOL_CHAT_TEMPLATE,
                                        eos_token="<eos>")
    return rendered[0]


def _fixed_strings(data) -> list[str]:
    """The strings every conversation repeats (system turn, instructions, call openings), longest first."""
    first = data[0]
    tools = json.loads(first["tools"])
    system = _rendered([{"role": "user", "content": ""}], tools).split("<|im_start|>user")[0]
    strings = {system, first["messages"][0]["content"].split("\n\n")[0]}
    strings |= {"<|im_start|>assistant\n", "<|im_start|>tool\n", "<|im_start|>user\n", "<tool_call>", "</tool_call>",
                "<eos>\n"}
    for row in data:
        for message in row["messages"]:
            for call in message.get("tool_calls") or []:
                arguments = json.loads(call["function"]["arguments"])
                name = next(iter(arguments))
                # the call's tags stay tokens of their own: transformers (5.25+) reads a tag as a delimiter only
                # where the model wrote the tag's own token
                strings.add(f'{{"name": "{call["function"]["name"]}", "arguments": {{"{name}": "')
    strings.add('"}}')
    return sorted(strings, key=lambda s: (-len(s), s))  # a set's order varies with the string hash seed


def tiny_tool_model(env_id: str, folder: str | Path, *, episodes: int = 32, sft_steps: int = 60, seed: int = 0,
                    **env_kwargs: Any) -> Path:
    """Folder of a tiny tool-calling model for ``env_id`` (built once; an existing folder is reused)."""
    import datasets
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    from gigpo_gym.algos.policies.tiny import TinySpec, build_tiny

    folder = Path(folder)
    if (folder / "tiny_tool_model.json").is_file():
        return folder
    data = expert_conversations(env_id, n=episodes, seed=seed, max_observation_tokens=TINY_OBSERVATION_BYTES,
                                **env_kwargs).remove_columns(["reward"])
    texts = [_rendered(row["messages"], json.loads(row["tools"])) for row in data]
    spec = TinySpec(vocab_size=1024, hidden_size=64, intermediate_size=128, num_layers=2, num_heads=2,
                    num_kv_heads=1, max_positions=2048, seed=seed)
    base = build_tiny(texts, spec, name=f"tools-{env_id.split('/')[-1]}")
    tokenizer = AutoTokenizer.from_pretrained(str(base))
    tokenizer.add_tokens(_fixed_strings(data))
    tokenizer = with_tool_template(tokenizer)
    with torch.random.fork_rng(devices=[]):  # the new tokens' rows and the SFT draw from `seed` alone
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_pretrained(str(base))
        model.resize_token_embeddings(len(tokenizer), mean_resizing=False)
        args = SFTConfig(output_dir=str(folder / "sft"), max_steps=sft_steps, per_device_train_batch_size=8,
                         learning_rate=5e-3, lr_scheduler_type="constant", logging_steps=sft_steps, report_to=[],
                         save_strategy="no", use_cpu=True, bf16=False, assistant_only_loss=True, seed=seed,
                         activation_checkpointing=False,
                         disable_tqdm=True)
        datasets.disable_progress_bars()  # its map steps over a few dozen rows: bars of no use
        SFTTrainer(model=model, args=args, train_dataset=data, processing_class=tokenizer).train()
    model.save_pretrained(str(folder))
    tokenizer.save_pretrained(str(folder))
    (folder / "tiny_tool_model.json").write_text(json.dumps({"env_id": env_id, "episodes": episodes,
                                                             "sft_steps": sft_steps, "seed": seed}))
    return folder
