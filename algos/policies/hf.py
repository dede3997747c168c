"""Hugging Face transformers backend of the policy interface.

Any causal LM that ``AutoModelForCausalLM.from_pretrained`` loads (local folder or hub
id; GGUF through ``gguf_file``), left-padded batched generation with a KV cache, LoRA
through peft, and an optional value head for critics.  The policy only tokenises what the
prompt stack built and truncates it: how a prompt text reaches the model (chat template,
system message, the start of the answer) is the stack's ``InputFormat``.  ``log_probs`` runs the decoder once and applies the LM head
to the response positions only, so the prompt's logits (seconds and gigabytes at a
152k vocabulary) are never built.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import inspect
import json
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
from torch import nn

from gigpo_gym.algos.policies import choice, decode
from gigpo_gym.algos.policies.attention import causal_attention
from gigpo_gym.algos.policies.quiet import quiet_libraries
from gigpo_gym.algos.policies.compiler import run_compiled, run_decoder
from gigpo_gym.algos.policies.vocab_scores import forward_scores, vocab_scores
from gigpo_gym.algos.policies.base import (
    ATTENTION, CHAT_CONTEXT, DECODERS, ChoiceBatch, Generation, SamplingParams, TokenBatch, TokenRows, TokenScores,
)
from gigpo_gym.core.extras import missing_extra_error
from gigpo_gym.wrappers.stack import InputFormat

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
_META_FILE = "policy.json"
_VALUE_FILE = "value_head.safetensors"


def _transformers():
    try:
        import transformers
    except ImportError as e:  # pragma: no cover - depends on the install
        raise missing_extra_error("train", "the Hugging Face policy backend") from e
    quiet_libraries()
    return transformers


class HFPolicy(nn.Module):
    """A causal LM as a trainable policy (see ``policies.base.TrainablePolicy``)."""

    def __init__(
        self,
        model: nn.Module,
        tokenizer: Any,
        *,
        device: str | torch.device = "cpu",
        input_format: InputFormat = InputFormat(),
        max_prompt_tokens: int = 2048,
        critic: bool = False,
        sampling_seed: int = 0,
        choose_admissible: bool = False,
        compute_dtype: str | None = None,
        gradient_checkpointing: bool = False,
        logits_chunk: int = 1024,
        decoder: str = "auto",
        rollout_dtype: str | None = "auto",
    ):
        super().__init__()
        self.model = model
        self._rollout = _RolloutCopy()
        self._cache_kw = _cache_keyword(model)
        self.tokenizer = tokenizer
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        #: How prompt texts reach the model (``PromptConfig.input_format``).
        self.input_format = input_format
        #: Whether prompts go through the tokenizer's chat template.
        self.use_chat_template = input_format.uses_chat(bool(getattr(tokenizer, "chat_template", None)))
        self.max_prompt_tokens = int(max_prompt_tokens)
        self._choose_admissible = bool(choose_admissible)
        if compute_dtype is not None and compute_dtype not in _DTYPES:
            raise ValueError(f"compute_dtype must be one of {sorted(_DTYPES)} or None, got {compute_dtype!r}")
        #: Autocast dtype of forward passes (None: the weights' own); the weights stay as loaded.
        self.compute_dtype = compute_dtype
        if int(logits_chunk) < 1:
            raise ValueError(f"logits_chunk must be >= 1, got {logits_chunk}")
        #: Response positions whose vocabulary logits exist at once (bounds memory at large vocabularies).
        self.logits_chunk = int(logits_chunk)
        if decoder not in DECODERS:
            raise ValueError(f"decoder must be one of {', '.join(DECODERS)}, got {decoder!r}")
        #: What samples free text: the package's decode loop, its static-cache form or continuous batching (``decode``).
        self.decoder = decoder
        self.gradient_checkpointing = False
        if gradient_checkpointing:
            self.set_checkpointing(True)
        hidden = self._base_config().hidden_size
        self.value_head = nn.Linear(hidden, 1) if critic else None
        if self.value_head is not None:
            nn.init.zeros_(self.value_head.weight)
            nn.init.zeros_(self.value_head.bias)
        self.device = resolve_device(str(device)) if isinstance(device, str) else device
        self.to(self.device)
        #: The gradient through the vocabulary in closed form (``vocab_scores``), not autograd's: fewer passes
        #: over the logits.  On CUDA only, so CPU runs repeat the numbers they always gave.
        self.written_vocab_backward = self.device.type == "cuda"
        #: Under that written backward and without checkpointing, the LM head's chunks keep their logits (in the
        #: compute dtype: all the written backward needs) instead of running again in the backward.  CUDA only.
        self.keep_chunk_logits = self.device.type == "cuda"
        #: The vocabulary's log-softmax, entropy and written gradient compiled (``run_compiled``): a few fused
        #: kernels over a chunk's bf16 logits, not passes over float32 copies.  CUDA only; autograd's path stays eager.
        self.compiled_vocab = self.device.type == "cuda"
        #: The decoder layers of ``forward`` (scoring and training) compiled (``compiler.run_decoder``): the norms,
        #: the rotary embedding, SwiGLU and the residual adds fused between the matmuls.  CUDA only (the trainer turns
        #: it off where several processes wrap the model); eager under gradient checkpointing, whose backward
        #: recomputes the layers eager.
        self.compiled_layers = self.device.type == "cuda"
        #: The static decoder's one-token steps attend by two matmuls (``attention.one_token_attention``), not SDPA's
        #: memory-efficient kernel.  Off until measured on a GPU: ``benchmarks/gpu_check.py`` compares the two.
        self.matmul_decoding = False
        #: The dtype of the copy of the weights that samples free text (None: the trained weights, under autocast).
        self.rollout_dtype = rollout_weights_dtype(rollout_dtype, self.device, self.weights_dtype, compute_dtype)
        #: Score and train on the rollout copy (``model.train_on_copy``; the trainer decides): its forwards and
        #: backwards run in ``rollout_dtype`` throughout, and each gradient is added into the trained weights'.
        self.train_on_copy = False
        self.resolved_decoder()  # a decoder that cannot run here is refused now, not at the first rollout
        self._generator = torch.Generator(device=self.device).manual_seed(int(sampling_seed))
        eos = self._base_config().eos_token_id if tokenizer.eos_token_id is None else tokenizer.eos_token_id
        self.eos_ids = set(eos if isinstance(eos, (list, tuple)) else [eos]) - {None}
        self._stop_cache: dict[tuple[str, ...], torch.Tensor] = {}  # see decode.stop_candidates

    # -- construction ----------------------------------------------------------------
    @classmethod
    def from_pretrained(
        cls,
        name_or_path: str | Path,
        *,
        device: str = "auto",
        dtype: str = "float32",
        gguf_file: str | None = None,
        lora: dict[str, Any] | None = None,
        attention: str = "auto",
        **kwargs: Any,
    ) -> "HFPolicy":
        """Load a causal LM and its tokenizer; ``lora`` (peft ``LoraConfig`` kwargs) adds adapters.

        ``attention`` is the attention kernel (``attention_kernel`` resolves ``"auto"``).
        """
        if dtype not in _DTYPES:
            raise ValueError(f"dtype must be one of {sorted(_DTYPES)}, got {dtype!r}")
        extra = {"gguf_file": gguf_file} if gguf_file else {}
        kernel = attention_kernel(attention, resolve_device(device), kwargs.get("compute_dtype") or dtype)
        tokenizer = load_tokenizer(str(name_or_path), **extra)
        model = load_causal_lm(name_or_path, dtype=_DTYPES[dtype], attn_implementation=kernel, **extra)
        policy = cls(model, tokenizer, device=device, **kwargs)
        if lora is not None:
            policy.add_lora(lora)
        return policy

    def add_lora(self, lora: dict[str, Any]) -> None:
        """Wrap the model in fresh LoRA adapters (peft ``LoraConfig`` kwargs); from here on only they train.

        Called after loading full weights into the policy (an SFT model, say), the
        adapters start on top of those weights: ``lora_B`` is zero, so the outputs do not change.
        """
        self.model = _add_lora(self.model, lora).to(self.device)

    def without_adapters(self):
        """A context in which the model runs without its LoRA adapters: the base model, the KL reference of a
        LoRA run.  Without adapters it changes nothing."""
        if not hasattr(self.model, "disable_adapter"):
            return contextlib.nullcontext()
        return self.model.disable_adapter()

    @classmethod
    def load(cls, path: str | Path, *, device: str = "auto", choose_admissible: bool | None = None) -> "HFPolicy":
        """Load what ``save`` wrote (a full model, or a base reference plus LoRA adapters).

        ``choose_admissible`` overrides the saved setting (None: keep it).
        """
        path = Path(path)
        meta_file = path / _META_FILE
        if not meta_file.is_file():
            raise FileNotFoundError(f"{meta_file} is missing: {path} is not a saved policy")
        meta = json.loads(meta_file.read_text())
        tokenizer = load_tokenizer(str(path))
        if (path / "adapter_config.json").is_file():
            from peft import PeftModel

            base = load_causal_lm(meta["base_model"], dtype=_DTYPES[meta["dtype"]])
            model = PeftModel.from_pretrained(base, str(path), is_trainable=True)
        else:
            model = load_causal_lm(path, dtype=_DTYPES[meta["dtype"]])
        policy = cls(
            model,
            tokenizer,
            device=device,
            input_format=InputFormat(meta["use_chat_template"], meta["system_prompt"], meta.get("response_prefix", "")),
            max_prompt_tokens=meta["max_prompt_tokens"],
            critic=meta["critic"],
            choose_admissible=meta.get("choose_admissible", False) if choose_admissible is None else choose_admissible,
            compute_dtype=meta.get("compute_dtype"),
            logits_chunk=meta.get("logits_chunk", 1024),
        )
        if policy.value_head is not None:
            from safetensors.torch import load_model

            load_model(policy.value_head, str(path / _VALUE_FILE), device=str(policy.device))
        return policy

    def save(self, path: str | Path) -> None:
        """Write a folder ``HFPolicy.load`` reads (safetensors weights, tokenizer, settings)."""
        from safetensors.torch import save_model

        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        self.model.save_pretrained(str(path))
        self.tokenizer.save_pretrained(str(path))
        if self.value_head is not None:
            save_model(self.value_head, str(path / _VALUE_FILE))
        meta = {
            "use_chat_template": self.use_chat_template,
            "system_prompt": self.input_format.system_prompt,
            "max_prompt_tokens": self.max_prompt_tokens,
            "critic": self.value_head is not None,
            "response_prefix": self.response_prefix,
            "choose_admissible": self.choose_admissible,
            "compute_dtype": self.compute_dtype,
            "logits_chunk": self.logits_chunk,
            "dtype": self.weights_dtype,
            "base_model": self._base_config().name_or_path,
        }
        (path / _META_FILE).write_text(json.dumps(meta, indent=2))

    # -- prompts: tokenised as the stack's ``InputFormat`` says, and truncated -------------
    @property
    def response_prefix(self) -> str:
        """The text every answer starts with, part of the prompt (``InputFormat.response_prefix``)."""
        return self.input_format.response_prefix

    def encode_prompt(self, prompt: str) -> list[int]:
        """Token ids of the text the stack's ``InputFormat.model_text`` builds from one prompt, cut to the last
        ``max_prompt_tokens`` (a chat template's text carries its own special tokens)."""
        text = self.input_format.model_text(prompt, self.tokenizer)
        ids = self.tokenizer(text, add_special_tokens=not self.use_chat_template)["input_ids"]
        return list(ids[-self.max_prompt_tokens :])

    def encode_chat(self, context: dict[str, Any]) -> list[int]:
        """Token ids of a chat context (``messages``, ``tools``, ``last_ids``: ``Policy``'s chat contract), as
        TRL's multi-turn loop builds them, so a model trained there sees the same tokens.

        The first turn is the messages rendered with the tools and the generation prompt;
        a later one is the previous turn's ids (``last_ids``: prompt and reply as
        generated) followed by the tokens of the tool messages since (``tool_suffix_ids``).
        Without ``last_ids`` the whole chat is rendered.  Never cut: a chat over
        ``max_prompt_tokens`` ends its episode (``generate``).  The chat template is
        ``chat.tool_chat``'s: the tokenizer's when it carries a response parser, else
        ``with_tool_template``'s.
        """
        from gigpo_gym.wrappers.chat import tool_chat, tool_suffix_ids

        template, _ = tool_chat(self.tokenizer)
        messages, last = list(context["messages"]), list(context.get("last_ids") or [])
        tail = 0
        while tail < len(messages) and messages[-1 - tail]["role"] == "tool":
            tail += 1
        if last and tail:
            return last + tool_suffix_ids(self.tokenizer, messages[-tail:], template)
        return list(self.tokenizer.apply_chat_template(self.input_format.with_system(messages), tools=context.get("tools") or None,
                                                       add_generation_prompt=True, tokenize=True, return_dict=False,
                                                       chat_template=template))

    def encode_answer(self, command: str) -> list[int]:
        """Token ids of the full answer ``<action>command</action>`` + eos, after ``response_prefix``."""
        answer = f"<action>{command}</action>"[len(self.response_prefix):]
        return list(self.tokenizer(answer, add_special_tokens=False)["input_ids"]) + [self.tokenizer.eos_token_id]

    # -- generation (the Policy contract, policies.base) -------------------------------
    #: One call may be cut into batches (the leaderboard's ``--batch-size``).
    concurrent = False

    @property
    def choose_admissible(self) -> bool:
        """Whether ``generate`` answers with one of the admissible actions (a constructor option, fixed for the
        policy's life: the trainer's scoring and the policy's answers must agree)."""
        return self._choose_admissible

    @property
    def needs_context(self) -> tuple[str, ...]:
        """What the rollout must pass to ``generate``: the admissible actions, to choose among; else what a chat
        needs (``CHAT_CONTEXT``: a row whose context has ``messages`` is answered as a chat, ``encode_chat``)."""
        return ("admissible_actions",) if self.choose_admissible else CHAT_CONTEXT

    def close(self) -> None:
        """Nothing to release: the model's memory goes with the policy."""

    @torch.no_grad()
    def generate(
        self, prompts: Sequence[str], sampling: SamplingParams, contexts: Sequence[dict[str, Any]] | None = None
    ) -> list[Generation]:
        """Sample one response per prompt (``policies.decode``: passes of similar length, KV cache, per-row stop).

        With ``choose_admissible`` the response is instead one of the row's admissible
        actions (``contexts[i]["admissible_actions"]``), drawn from the model's own
        likelihoods of the candidate answers (``policies.choice``).  A row whose context has
        ``messages`` is a chat (``_chat``).
        """
        if not prompts:
            return []
        was_training = self.training
        self.eval()
        try:
            chats = [c if c and c.get("messages") else None for c in (contexts or [None] * len(prompts))]
            if any(chats):
                if self.choose_admissible:
                    raise ValueError("choose_admissible answers prompt strings with an admissible action, not a chat")
                return self._chat(prompts, chats, sampling)
            prompt_ids = [self.encode_prompt(p) for p in prompts]
            if self.choose_admissible:
                if contexts is None or len(contexts) != len(prompts):
                    raise ValueError("choose_admissible needs one context with admissible_actions per prompt")
                options = [list(c.get("admissible_actions") or []) for c in contexts]
                return choice.choose(self, prompt_ids, options, sampling, self._generator_for(sampling))
            return self._generate(prompt_ids, sampling)
        finally:
            self.train(was_training)

    def _chat(self, prompts: Sequence[str], chats: list[dict[str, Any] | None], sampling: SamplingParams) -> list[Generation]:
        """Answer each chat row (``encode_chat``) and any plain one; a chat's reply text is its parsed message
        (``chat.parse_reply``, TRL's reading) written back with ``tools.render_calls``.

        A chat longer than ``max_prompt_tokens`` gets no reply: a ``Generation`` with
        ``error`` and ``error_status="truncated"`` ends its episode, as a conversation
        over TRL's completion budget ends there.
        """
        from gigpo_gym.wrappers.chat import parse_reply, tool_chat
        from gigpo_gym.wrappers.tool_calls import render_calls

        ids = [self.encode_chat(c) if c else self.encode_prompt(p) for p, c in zip(prompts, chats)]
        fit = [i for i, x in enumerate(ids) if len(x) <= self.max_prompt_tokens]
        answers = dict(zip(fit, self._generate([ids[i] for i in fit], sampling) if fit else []))
        _, parser = tool_chat(self.tokenizer)
        out = []
        for i, (row, chat) in enumerate(zip(ids, chats)):
            if i not in answers:
                out.append(Generation("", row, [], [], finished=False, error_status="truncated",
                                      error=f"the chat has {len(row)} tokens, over max_prompt_tokens={self.max_prompt_tokens}"))
                continue
            g = answers[i]
            if chat is not None:
                g.text = render_calls(*parse_reply(self.tokenizer, g.response_ids, row, chat.get("tools") or None, parser))
            out.append(g)
        return out

    def _generate(self, prompt_ids: list[list[int]], sampling: SamplingParams) -> list[Generation]:
        """Free text by the configured decoder, with the rollout weights (``rollout_model``).

        The trained weights compute in ``compute_dtype`` as the update does (bf16 autocast
        on GPUs, not float32); a rollout copy computes in its own dtype, without autocast.
        """
        gen = self._generator_for(sampling)
        model = self.rollout_model()
        with self.compute() if model is self.model else sdpa_backends(self.device):
            decoder = self.resolved_decoder()
            if decoder == "continuous":
                return decode.generate_continuous(self, prompt_ids, sampling, model=model)
            if decoder == "static":
                return decode.generate_static(self, prompt_ids, sampling, gen, model=model)
            return decode.generate(self, prompt_ids, sampling, gen, model=model)

    def _generator_for(self, sampling: SamplingParams) -> torch.Generator:
        """The draws' generator: the policy's own stream, or a fresh one where ``sampling`` names a seed."""
        if sampling.seed is None:
            return self._generator
        return torch.Generator(device=self.device).manual_seed(int(sampling.seed))

    def resolved_decoder(self) -> str:
        """The decoder free text runs through (``decoder_for``): "auto" resolved, "static" refused where it cannot run."""
        weights = next(self.model.parameters()).dtype
        autocast = _DTYPES[self.compute_dtype] if self.rollout_dtype is None and self.compute_dtype else None
        if decode.static_cache_fits(weights, autocast):
            return decoder_for(self.decoder, self.device)
        if self.decoder == "static":
            import transformers

            raise ValueError(
                f"model.decoder: static cannot sample with {weights} weights under {self.compute_dtype} autocast on "
                f"transformers {transformers.__version__}: its static cache keeps keys and values in one dtype, and "
                f"autocast writes them in two (fixed in transformers 5.24). Set model.rollout_dtype: "
                f"{self.compute_dtype} (a copy of the weights samples), model.decoder: loop, or upgrade transformers")
        return "loop" if self.decoder == "auto" else self.decoder

    def rollout_model(self) -> nn.Module:
        """What samples free text: the model itself, or its copy in ``rollout_dtype`` with the weights as they are now."""
        if self.rollout_dtype is None:
            return self.model
        return self._rollout.of(self.model, _DTYPES[self.rollout_dtype]).eval()

    def scoring_model(self) -> nn.Module:
        """What ``forward`` runs: the model itself (under autocast), or with ``train_on_copy`` the rollout copy with
        the weights as they are now, whose gradients go into the trained weights' as the backward makes them.

        On a copy in bf16 the residual stream, the norms and the rotary embedding compute
        in bf16 too, as under verl's FSDP mixed precision, where autocast over float32
        weights keeps them in float32: fewer bytes moved, and no cast of every weight at
        every forward.  The float32 weights stay what the optimiser steps and what is saved.
        """
        if not self.train_on_copy or self.rollout_dtype is None:
            return self.model
        dtype = _DTYPES[self.rollout_dtype]
        if next(self.model.parameters()).dtype == dtype:  # e.g. a bf16 KL reference: its weights are the copy
            return self.model
        return self._rollout.of(self.model, dtype, trainable=True).train(self.training)

    def _left_padded(self, prompt_ids: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        """Ids and attention mask with every prompt ending at the same position (for a shared KV cache)."""
        width = max(len(p) for p in prompt_ids)
        ids = torch.full((len(prompt_ids), width), self.tokenizer.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(prompt_ids), width), dtype=torch.long)
        for i, p in enumerate(prompt_ids):
            ids[i, width - len(p) :] = torch.tensor(p, dtype=torch.long)
            mask[i, width - len(p) :] = 1
        return self.to_device(ids), self.to_device(mask)

    def _hit_stop(self, response: list[int], stop: tuple[str, ...]) -> bool:
        tail = self.tokenizer.decode(response[-16:], skip_special_tokens=True)
        return any(s in tail for s in stop)

    def _decode(self, response: list[int], stop: tuple[str, ...]) -> str:
        text = self.tokenizer.decode(response, skip_special_tokens=True)
        for s in stop:
            cut = text.find(s)
            if cut >= 0:
                text = text[: cut + len(s)]
        return text

    # -- scoring ---------------------------------------------------------------------
    def forward(self, batch: TokenBatch | TokenRows, *, with_entropy: bool = False, with_values: bool = False) -> TokenScores:
        """Differentiable log-probs (and entropy, values) of the response tokens only.

        A ``ChoiceBatch`` is scored as a choice among its options instead (``choice.choice_scores``);
        ``TokenRows`` (``token_rows``) are ids on the device already, as the update passes them.

        Everything the loss needs comes out of this one call, so a wrapper around the
        module (DDP, FSDP, DeepSpeed through accelerate) sees every parameter use.  The
        decoder runs once over prompt + response (right-padded: with causal attention a
        real token never sees the padding after it, so no mask is needed); the LM head
        runs on the response positions only, ``logits_chunk`` positions at a time.
        """
        if len(batch) == 0:
            raise ValueError("empty batch")
        if isinstance(batch, ChoiceBatch):
            return choice.choice_scores(self, batch, with_entropy, with_values)
        packed = batch if isinstance(batch, TokenRows) else self.token_rows(batch)
        prompt_lens, resp_lens = torch.from_numpy(packed.prompt_lengths), torch.from_numpy(packed.response_lengths)
        if int(prompt_lens.min()) < 1:
            raise ValueError("every row needs at least one prompt token")
        ids, width = packed.ids, packed.ids.shape[1]
        positions = torch.arange(width, device=self.device)[None, :].expand(len(packed), -1)
        model = self.scoring_model()
        compiled = self.compiled_layers and not (torch.is_grad_enabled() and self.gradient_checkpointing)
        with self.compute() if model is self.model else sdpa_backends(self.device), causal_attention(model):
            hidden = run_decoder(model.get_decoder(), compiled, input_ids=ids, position_ids=positions,
                                 use_cache=False).last_hidden_state
        # the hidden state at (prompt_len + j - 1) predicts response token j
        max_resp = max(int(resp_lens.max()), 1)
        mask = torch.arange(max_resp)[None, :] < resp_lens[:, None]
        rows, cols = mask.nonzero(as_tuple=True)
        at = self.to_device(prompt_lens[rows] + cols - 1)
        rows_d, cols_d = self.to_device(rows), self.to_device(cols)
        token_logp, entropy = self._score_positions(model.get_output_embeddings(), hidden[rows_d, at],
                                                    ids[rows_d, at + 1], with_entropy)
        out_logp = torch.zeros((len(packed), max_resp), dtype=torch.float32, device=self.device)
        out_logp = out_logp.index_put((rows_d, cols_d), token_logp)
        out_entropy = None
        if with_entropy:
            out_entropy = torch.zeros_like(out_logp).index_put((rows_d, cols_d), entropy)
        extras = {}
        if with_values:
            extras["values"] = self._value_at(hidden, self.to_device(prompt_lens - 1))
        return TokenScores(out_logp, self.to_device(mask.float()), out_entropy, extras)

    def token_rows(self, batch: TokenBatch) -> TokenRows:
        """``batch`` as one right-padded id tensor on the device (``TokenRows``), the form ``forward`` scores."""
        prompt = np.array([len(p) for p in batch.prompt_ids], dtype=np.int64)
        response = np.array([len(r) for r in batch.response_ids], dtype=np.int64)
        ids = torch.full((len(batch), int((prompt + response).max(initial=0))), self.tokenizer.pad_token_id,
                         dtype=torch.long)
        for i, (p, r) in enumerate(zip(batch.prompt_ids, batch.response_ids)):
            ids[i, : len(p) + len(r)] = torch.tensor(list(p) + list(r), dtype=torch.long)
        return TokenRows(self.to_device(ids), prompt, response)

    def log_probs(self, batch: TokenBatch | TokenRows, *, with_entropy: bool = False, with_values: bool = False) -> TokenScores:
        """``forward`` under its protocol name (``TrainablePolicy.log_probs``)."""
        return self(batch, with_entropy=with_entropy, with_values=with_values)

    def _score_positions(self, head: nn.Module, hidden: torch.Tensor, targets: torch.Tensor, with_entropy: bool):
        """Log-prob of ``targets`` (and entropy) at each hidden state by the LM ``head``, ``logits_chunk`` states at a
        time.

        Under autograd each chunk is recomputed in the backward pass instead of keeping
        its ``[chunk, vocabulary]`` logits: at a 152k vocabulary a long micro-batch's
        logits alone would take gigabytes, and autograd's backward of the log-softmax keeps
        float32 copies beside them.  The written backward (``vocab_scores``) keeps only the
        logits, 2 bytes a position and vocabulary entry in bf16: where nothing else is
        recomputed for memory (no checkpointing), the chunks keep them (``keep_chunk_logits``)
        and the head runs once.  The trainer's token budget counts those bytes.
        """
        logps, entropies = [], []
        chunks = range(0, max(hidden.shape[0], 1), self.logits_chunk)
        recompute = torch.is_grad_enabled() and len(chunks) > 1 and not self.keeps_logits()
        with self.autocast():  # one region: autocast casts float32 head weights once for all chunks, not per chunk
            for start in chunks:
                part = (hidden[start : start + self.logits_chunk], targets[start : start + self.logits_chunk])
                if recompute:
                    logp, ent = torch.utils.checkpoint.checkpoint(self._chunk_scores, head, *part, with_entropy,
                                                                  use_reentrant=False)
                else:
                    logp, ent = self._chunk_scores(head, *part, with_entropy)
                logps.append(logp)
                entropies.append(ent)
        return torch.cat(logps), (torch.cat(entropies) if with_entropy else None)

    def keeps_logits(self) -> bool:
        """Whether the LM head's chunks keep their logits for the backward (see ``_score_positions``)."""
        return self.keep_chunk_logits and self.written_vocab_backward and not self.gradient_checkpointing

    def kept_logits_bytes(self) -> int:
        """Bytes a response position keeps of its logits for the backward without checkpointing (0: none kept)."""
        if not (self.keep_chunk_logits and self.written_vocab_backward):
            return 0
        dtype = _DTYPES[self.compute_dtype] if self.compute_dtype else next(self.model.parameters()).dtype
        return self.model.get_output_embeddings().weight.shape[0] * dtype.itemsize

    def _chunk_scores(self, head: nn.Module, hidden: torch.Tensor, targets: torch.Tensor, with_entropy: bool):
        logits = head(hidden)  # under _score_positions' autocast (a checkpoint's recompute restores it)
        if torch.is_grad_enabled() and self.written_vocab_backward:
            return vocab_scores(logits, targets, with_entropy, self.compiled_vocab)
        compiled = self.compiled_vocab and not torch.is_grad_enabled()  # autograd's own backward stays eager
        logp, entropy, _ = run_compiled(forward_scores, compiled, logits, targets, with_entropy)
        return logp, entropy

    def values(self, batch: TokenBatch) -> torch.Tensor:
        """Critic value of each row's prompt (the hidden state of its last prompt token)."""
        prompts_only = TokenBatch(batch.prompt_ids, [[] for _ in batch.prompt_ids])
        return self(prompts_only, with_values=True).extras["values"]

    def _value_at(self, hidden: torch.Tensor, last_prompt: torch.Tensor) -> torch.Tensor:
        if self.value_head is None:
            raise RuntimeError("this policy has no value head; build it with critic=True")
        picked = hidden[torch.arange(hidden.shape[0], device=self.device), last_prompt]
        return self.value_head(picked.float()).squeeze(-1)

    @property
    def weights_dtype(self) -> str:
        """The dtype of the model's weights as a config names it ("float32")."""
        return str(next(self.model.parameters()).dtype).removeprefix("torch.")

    def autocast(self):
        """Mixed precision for forward passes when ``compute_dtype`` is set (weights stay as they are)."""
        if self.compute_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=_DTYPES[self.compute_dtype])

    @contextlib.contextmanager
    def compute(self):
        """What every decoder pass runs under: ``autocast`` and the attention kernels ``sdpa_backends`` allows."""
        with self.autocast(), sdpa_backends(self.device):
            yield

    def set_checkpointing(self, enabled: bool) -> None:
        """Recompute each decoder layer in the backward pass (``enabled``) or keep its activations (the rollout
        copy's too, which ``train_on_copy`` trains through)."""
        for model in (m for m in (self.model, self._rollout.model) if m is not None):
            if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5.x
                if enabled:
                    model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
                else:
                    model.activation_checkpointing_disable()
            elif enabled:
                model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            else:
                model.gradient_checkpointing_disable()
        self.gradient_checkpointing = bool(enabled)

    # -- helpers ---------------------------------------------------------------------
    def to_device(self, tensor: torch.Tensor) -> torch.Tensor:
        """A host tensor on the policy's device, without waiting for the GPU's queue.

        A blocking copy to a GPU waits for every kernel queued before it; in the update's
        loop that would stall the host once per micro-batch.  From pageable memory CUDA
        stages the bytes before the call returns, so the host tensor may go at once.
        """
        return tensor.to(self.device, non_blocking=True)

    def _base_config(self) -> Any:
        return self.model.config


def load_causal_lm(name_or_path: str | Path, **kwargs: Any) -> nn.Module:
    """``AutoModelForCausalLM.from_pretrained`` with transformers' Hub kernels off (``use_kernels=False``).

    Recent transformers (5.25 requires the ``kernels`` package) swap a model's layers for
    kernels fetched from the Hub at its first ``train()`` or ``eval()`` on a GPU: a download
    at run time, and numbers other than the tested ones.  Offline the swap fails: on an
    H200 with transformers 5.25 the trainer stopped at its first update on fetching
    ``kernels-community/rotary``.
    """
    return _transformers().AutoModelForCausalLM.from_pretrained(str(name_or_path), use_kernels=False, **kwargs)


def resolve_device(name: str) -> torch.device:
    """``"auto"`` -> cuda when available, else cpu; anything else as torch names it."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def sdpa_backends(device: torch.device):
    """SDPA's kernels on a GPU: flash, memory-efficient or math, never cuDNN's.

    Measured on an H200 (torch 2.11): SDPA chose cuDNN's attention, which builds a plan
    for every new sequence length, 7 ms of host time per layer and call; a decoding step
    (a new length each time) took 322 ms at 128 rows, and every micro-batch of the update
    (lengths differ) paid it again.  Its backward is also non-deterministic.
    """
    if torch.device(device).type != "cuda":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH])


def decoder_for(name: str, device: torch.device) -> str:
    """The decoder ``"auto"`` means on ``device``: the static-cache loop on CUDA, the plain loop elsewhere.

    On an H200, at the 1.5B recipe's 128 rows, a decoding step of the plain loop took
    77 ms, and plain transformers code on the same shapes took 20.6 ms with a growing cache
    in bf16 and 12.5 ms with a static cache under ``torch.compile`` (its steps as CUDA
    graphs); continuous batching reached 675 tokens/s in all (docs/gpu.md).  The static
    decoder here captures its step as a CUDA graph without compiling it: in the GPU check
    of 2026-12-04 (H200, transformers 5.25) it decoded the recipe's 128 rows at 14.3 ms a
    step over an iteration.  On a CPU the plain loop drops ended rows from the batch, which
    a static cache cannot.  ``benchmarks/gpu_check.py`` times the decoders against each other.
    """
    if name != "auto":
        return name
    return "static" if torch.device(device).type == "cuda" else "loop"


def rollout_weights_dtype(name: str | None, device: torch.device, weights: str, compute_dtype: str | None) -> str | None:
    """The dtype of the weights that sample free text (``model.rollout_dtype``); None: the trained weights themselves.

    ``"auto"``: on CUDA, a copy in ``compute_dtype`` where the weights are kept in another
    (float32 master weights under bf16 autocast: autocast casts every weight at every
    decoding step; measured on an H200, a plain loop decoded 128 rows at 28.4 ms a step so,
    20.6 ms with bf16 weights); elsewhere none.  A copy's log-probs are not the trained
    model's, so the trainer then recomputes the old log-probs.
    """
    if name == "auto":
        wanted = compute_dtype if torch.device(device).type == "cuda" else None
    elif name is None or name in _DTYPES:
        wanted = name
    else:
        raise ValueError(f"rollout_dtype must be one of {['auto', *sorted(_DTYPES)]} or None, got {name!r}")
    return None if wanted in (None, weights) else wanted


def attention_kernel(name: str, device: torch.device, compute_dtype: str) -> str:
    """The attention implementation a model loads with (transformers' ``attn_implementation``).

    ``"auto"`` takes FlashAttention-2 where the ``flash_attn`` package imports, the model
    runs on a GPU and computes in 16 bits; otherwise PyTorch's SDPA, which picks its own
    flash or memory-efficient kernel on a GPU and a fused kernel on a CPU.
    """
    if name not in ATTENTION:
        raise ValueError(f"attention must be one of {', '.join(ATTENTION)}, got {name!r}")
    if name != "auto":
        return name
    import importlib.util

    sixteen_bits = compute_dtype in ("bfloat16", "float16")
    if device.type == "cuda" and sixteen_bits and importlib.util.find_spec("flash_attn") is not None:
        return "flash_attention_2"
    return "sdpa"


def load_tokenizer(name_or_path: str, **kwargs: Any) -> Any:
    """The tokenizer of a model folder or id.

    A folder whose ``tokenizer_config.json`` declares the generic class is loaded from
    its ``tokenizer.json`` exactly: ``AutoTokenizer`` would rebuild it as the model
    type's own tokenizer class (e.g. Qwen2's), dropping a custom pre-tokeniser such as
    the tiny model's.
    """
    tf = _transformers()
    config_file = Path(name_or_path) / "tokenizer_config.json"
    if not kwargs and config_file.is_file() and (Path(name_or_path) / "tokenizer.json").is_file():
        declared = json.loads(config_file.read_text()).get("tokenizer_class")
        if declared in ("TokenizersBackend", "PreTrainedTokenizerFast"):
            return tf.PreTrainedTokenizerFast.from_pretrained(name_or_path)
    return tf.AutoTokenizer.from_pretrained(name_or_path, **kwargs)


def _cache_keyword(model: Any) -> str:
    """The KV-cache keyword of the installed transformers (``cache`` in recent 5.x, before: ``past_key_values``)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"


def _add_lora(model: nn.Module, lora: dict[str, Any]) -> nn.Module:
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError as e:  # pragma: no cover - depends on the install
        raise missing_extra_error("train", "LoRA adapters") from e
    settings = {"r": 8, "lora_alpha": 16, "lora_dropout": 0.0, "target_modules": "all-linear"}
    settings.update(lora)
    return get_peft_model(model, LoraConfig(task_type="CAUSAL_LM", **settings))


class _RolloutCopy:
    """The rollout weights: a copy of a model with its parameters in another dtype, to sample with (and, made
    ``trainable``, to score and train through: ``HFPolicy.train_on_copy``).

    Not a submodule (never saved, never in a state dict), and a deep copy of the policy
    (the KL reference) starts without one.  Every call copies the trained weights in
    again (an optimiser step, a loaded checkpoint, the SFT warm start: none can leave it
    stale; torch's in-place counters miss a fused AdamW step).  For 1.5B float32 weights
    that is 9 GB of traffic, about 2 ms on an H200.  Buffers (the rotary frequencies) keep
    their dtype.  A trainable copy hands each gradient to its trained weight as the backward
    finishes it (added in that weight's float32, as FSDP's mixed precision reduces) and keeps
    none itself.
    """

    def __init__(self) -> None:
        self.model: nn.Module | None = None
        self.trainable = False

    def __deepcopy__(self, memo: dict) -> "_RolloutCopy":
        return _RolloutCopy()

    @torch.no_grad()
    def of(self, model: nn.Module, dtype: torch.dtype, trainable: bool = False) -> nn.Module:
        if self.model is None:
            self.model = copy.deepcopy(model).eval()
            for p in self.model.parameters():
                p.requires_grad_(False)
                p.grad = None
                p.data = p.data.to(dtype)
        else:  # through .data: no version bump, so two forwards before one backward still find their weights
            for mine, theirs in zip(self.model.parameters(), model.parameters()):
                mine.data.copy_(theirs)
        if trainable and not self.trainable:
            for mine, theirs in zip(self.model.parameters(), model.parameters()):
                if theirs.requires_grad:
                    mine.requires_grad_(True)
                    mine.register_post_accumulate_grad_hook(functools.partial(_add_gradient, theirs))
            self.trainable = True
        return self.model


def _add_gradient(trained: torch.Tensor, copied: torch.Tensor) -> None:
    """``copied``'s gradient, just accumulated, into ``trained``'s (in ``trained``'s dtype); the copy keeps none."""
    if trained.grad is None:
        trained.grad = copied.grad.to(trained.dtype)
    else:
        trained.grad.add_(copied.grad)
    copied.grad = None
