"""A tiny randomly initialised causal LM with a BPE tokenizer trained on env text.

Built in seconds on a CPU and cached: the tokenizer is trained deterministically on a
text corpus (typically prompts and expert actions of the target env, see
``algos.sft.expert_demonstrations``), so env words are single tokens and prompts stay
short; the model is a small Qwen2 initialised from a fixed seed.  Same corpus and
settings -> the same files, in any process.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterable

import torch

from gigpo_gym.algos.policies.quiet import quiet_libraries
from gigpo_gym.core.anchor import digest
from gigpo_gym.core.data import cache_dir

#: Bump when the builder's output changes, so an old cache is never read.
TINY_VERSION = "tiny-v3"
PAD, EOS = "<pad>", "<eos>"
#: Where pre-tokenisation cuts (delimiters kept as their own pieces, spaces around them too).
PHRASE_BREAKS = r"\s*[|\n:;,.!?<>/\[\]()=\-]\s*"
#: Whole tokens for the answer tags every prompt asks for (byte-level BPE would split them).
TAG_TOKENS = ("<action>", "</action>", "<search>", "</search>", "<answer>", "</answer>", "<think>", "</think>")


@dataclass(frozen=True)
class TinySpec:
    """Shape of the tiny model and its tokenizer."""

    vocab_size: int = 8192
    hidden_size: int = 128
    intermediate_size: int = 384
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 2
    max_positions: int = 2048
    seed: int = 0
    #: "phrases": BPE merges across spaces (whole commands become one or two tokens);
    #: "words": merges stay inside words, so a name ("mug") is the same token in the
    #: goal, the observation and the commands (longer prompts, easier to relate).
    pieces: str = "phrases"


def train_tokenizer(corpus: Iterable[str], vocab_size: int, pieces: str = "phrases"):
    """A byte-level BPE trained on ``corpus`` (deterministic), as a transformers tokenizer.

    Text is cut only at punctuation and line breaks, not at spaces, so BPE merges whole
    frequent phrases: an admissible command such as "go to cabinet 1" becomes one or
    two tokens, the same ones in the prompt's action list and in the answer.  Prompts
    get ~2x shorter and answers ~3x shorter than with word-level pieces, which is what
    lets a tiny model learn on a CPU.
    """
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    if pieces not in ("words", "phrases"):
        raise ValueError(f"pieces must be 'words' or 'phrases', got {pieces!r}")
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PHRASE_BREAKS), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=pieces == "words"),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[PAD, EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(corpus), trainer=trainer)
    tok.add_tokens(list(TAG_TOKENS))
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token=PAD, eos_token=EOS)


def init_model(spec: TinySpec, tokenizer):
    """A Qwen2 causal LM with weights drawn from ``spec.seed`` (global RNG untouched)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_layers,
        num_attention_heads=spec.num_heads,
        num_key_value_heads=spec.num_kv_heads,
        max_position_embeddings=spec.max_positions,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(spec.seed)
        model = Qwen2ForCausalLM(config)
    return model


def build_tiny(corpus: list[str], spec: TinySpec = TinySpec(), *, name: str = "tiny") -> Path:
    """Folder of a tiny model + tokenizer for ``corpus`` (built once, then read from the cache)."""
    key = digest({"version": TINY_VERSION, "spec": asdict(spec), "corpus": corpus})
    target = cache_dir("models", TINY_VERSION) / f"{name}-{key}"
    if (target / "build.json").is_file():
        return target
    quiet_libraries()
    tokenizer = train_tokenizer(corpus, spec.vocab_size, spec.pieces)
    model = init_model(spec, tokenizer)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=target.parent))
    try:
        model.save_pretrained(str(tmp))
        tokenizer.save_pretrained(str(tmp))
        (tmp / "build.json").write_text(json.dumps({"version": TINY_VERSION, "spec": asdict(spec), "key": key}))
        try:
            os.replace(tmp, target)
        except OSError:  # another process finished first: theirs is identical
            if not (target / "build.json").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target
