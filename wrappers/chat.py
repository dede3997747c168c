"""A tool-calling chat template for tokenizers that lack one (SmolLM2's, a tiny test model's).

ChatML turns (``<|im_start|>role ... <end>``) whose end marker is the tokenizer's own
EOS token, so generation stops where a turn ends.  The tools are listed one a line
(name, arguments, descriptions) in the system turn; a call is written ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``
and a tool result is a ``tool`` turn.  Each message renders on its own, so the template
is prefix-preserving (TRL's multi-turn loop needs that), and assistant turns carry
``{% generation %}`` markers (TRL's SFT ``assistant_only_loss`` needs them).  ``response_template`` is the
matching parser spec that transformers' ``parse_response`` reads.
"""

from __future__ import annotations

import re
from typing import Any

TOOL_CHAT_TEMPLATE = (
    "{%- set end = eos_token -%}{%- set ns = namespace(listing='', body='') -%}"
    "{%- if messages and messages[0]['role'] == 'system' -%}"
    "{%- set system = messages[0]['content'] -%}{%- set turns = messages[1:] -%}"
    "{%- else -%}{%- set system = '' -%}{%- set turns = messages -%}{%- endif -%}"
    "{%- if tools -%}"
    "{%- set ns.listing = 'You can call these tools:' -%}"
    "{%- for tool in tools -%}"
    "{%- set function = tool['function'] if 'function' in tool else tool -%}"
    "{%- set properties = function['parameters']['properties'] -%}"
    "{%- set ns.listing = ns.listing ~ '\\n- ' ~ function['name'] ~ '(' ~ (properties | list | join(', ')) ~ '): ' "
    "~ function['description'] -%}"
    "{%- for name in properties -%}"
    "{%- set ns.listing = ns.listing ~ ' ' ~ name ~ ': ' ~ properties[name].get('description', '') -%}"
    "{%- endfor -%}"
    "{%- endfor -%}"
    "{%- set listing = ns.listing ~ '\\nTo call one, write <tool_call>{\"name\": ..., \"arguments\": {...}}</tool_call>.' -%}"
    "{%- set system = (system ~ '\\n\\n' ~ listing) if system else listing -%}"
    "{%- endif -%}"
    "{%- if system -%}{{ '<|im_start|>system\\n' ~ system ~ end ~ '\\n' }}{%- endif -%}"
    "{%- for message in turns -%}"
    "{%- set ns.body = message['content'] if message['content'] is string else '' -%}"
    "{%- for call in message.get('tool_calls') or [] -%}"
    "{%- set function = call['function'] if 'function' in call else call -%}"
    "{%- set arguments = function['arguments'] -%}"
    "{%- set ns.body = ns.body ~ '<tool_call>{\"name\": ' ~ (function['name'] | tojson) ~ ', \"arguments\": ' ~ "
    "(arguments if arguments is string else (arguments | tojson)) ~ '}</tool_call>' -%}"
    "{%- endfor -%}"
    "{{ '<|im_start|>' ~ message['role'] ~ '\\n' }}"
    "{%- if message['role'] == 'assistant' -%}"
    "{%- generation -%}{{ ns.body ~ end }}{%- endgeneration -%}{{ '\\n' }}"
    "{%- else -%}{{ ns.body ~ end ~ '\\n' }}{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}"
)


def response_template(eos_token: str) -> dict[str, Any]:
    """The parser spec of ``TOOL_CHAT_TEMPLATE``'s assistant turn: free text, then tool calls, then EOS."""
    return {
        "defaults": {"role": "assistant"},
        "start_anchor": "<|im_start|>assistant\n",
        "fields": {
            "tool_calls": {"open": "<tool_call>", "close_pattern": r"</tool_call>\s*", "repeats": True,
                           "content": "json", "transform": {"type": "function", "function": "{content}"}},
            "content": {"close_pattern": re.escape(eos_token) + r"\s*", "content": "text"},
        },
    }


def tool_chat(tokenizer: Any) -> tuple[str | None, dict[str, Any]]:
    """(chat template, response parser) of a tool-calling conversation with ``tokenizer``.

    A tokenizer that carries both (the folder TRL's trainer saved after ``with_tool_template``)
    keeps its own (None: its chat template); any other gets ``TOOL_CHAT_TEMPLATE`` and its
    parser, what ``with_tool_template`` gives a tokenizer TRL cannot parse.  The tokenizer
    is not changed.
    """
    parser = getattr(tokenizer, "response_template", None)
    if getattr(tokenizer, "chat_template", None) and parser is not None:
        return None, parser
    if tokenizer.eos_token is None:
        raise ValueError("the tokenizer has no eos_token; the tool template ends each turn with it")
    return TOOL_CHAT_TEMPLATE, response_template(tokenizer.eos_token)


def tool_suffix_ids(tokenizer: Any, messages: list[dict[str, Any]], chat_template: str | None = None) -> list[int]:
    """The tokens the tool messages ``messages`` add after a reply, as TRL's ``GRPOTrainer._get_tool_suffix_ids``
    computes them: the template's rendering after a dummy call, from the end of its EOS on."""
    call = [{"role": "user", "content": "dummy"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"type": "function", "function": {"name": messages[0]["name"], "arguments": {}}}]}]
    before = tokenizer.apply_chat_template(call, add_generation_prompt=False, tokenize=True, return_dict=False,
                                           chat_template=chat_template)
    after = tokenizer.apply_chat_template(call + messages, add_generation_prompt=True, tokenize=True, return_dict=False,
                                          chat_template=chat_template)
    ends = [i for i, token in enumerate(before) if token == tokenizer.eos_token_id]
    if ends:
        before = before[: ends[-1] + 1]
    if after[: len(before)] != before:
        raise ValueError("Unexpected tokenization: the EOS-trimmed prefix IDs are not a prefix of the full IDs.")
    return after[len(before):]


def parse_reply(tokenizer: Any, ids: list[int], prefix: list[int], tools: list[Any] | None,
                parser: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    """(content, calls ``{"name", "arguments"}``) of the reply ``ids``, as TRL's ``parse_response`` reads it.

    ``parser`` is the response template (``tool_chat``).  A reply whose calls do not
    parse, or are not well formed, is plain text without calls (TRL's fallback).
    """
    try:
        parsed = tokenizer.parse_response(ids, schema=parser, prefix=prefix, tools=tools)
        if parsed is None:
            raise ValueError("nothing parsed")
        content = parsed.get("content")
        content = content.removesuffix(tokenizer.eos_token) if isinstance(content, str) else ""
        calls = parsed.get("tool_calls") or []
        if not isinstance(calls, list):
            raise ValueError("tool_calls must be a list")
        out = []
        for call in calls:
            function = call.get("function", call) if isinstance(call, dict) else None
            if not isinstance(function, dict) or not isinstance(function.get("name"), str):
                raise ValueError("a tool call without a name")
            arguments = function.get("arguments")
            out.append({"name": function["name"], "arguments": {} if arguments is None else arguments})
    except (ValueError, TypeError):
        return tokenizer.decode(ids, skip_special_tokens=True), []
    return content or "", out
