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
