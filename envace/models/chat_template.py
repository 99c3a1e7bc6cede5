"""The chat template of the tiny model: Qwen3's layout for system prompt, tools, tool calls and tool
responses (`<|im_start|>` turns, a `# Tools` section with `<tools>` JSON schemas, `<tool_call>` blocks,
consecutive tool messages grouped into one user turn of `<tool_response>` blocks), so prompts built for
the tiny model look like those a real Qwen3 sees. `envace.toolcall.render_tool_call` writes the same block.

Departures from Qwen3: no `<think>` handling (`enable_thinking` is ignored), the tool name is written
with `tojson` too, and the boilerplate is cut to one short line each (the tiny model pays for every
prompt token); the one-line-signature variant keeps only `# Tools` and the `<tools>` tags.
"""

from __future__ import annotations

TOOLS_HEADER = "# Tools\n\nYou may call these functions:\n<tools>"
TOOLS_FOOTER = ("\n</tools>\n\nTo call one, answer with:\n<tool_call>\n"
                '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>')
# The signature (tiny-model) variant drops the answer-format sentence: the model learns the call format
# from SFT, and the sentence was ~45 of the ~160 system-prompt tokens every Act prompt carries.
COMPACT_TOOLS_HEADER = "# Tools\n<tools>"
COMPACT_TOOLS_FOOTER = "\n</tools>"

# Whitespace control (`{%-`, `-%}`) keeps the Jinja source readable without leaking newlines.
_JSON_TOOLS = "{%- for tool in tools -%}{{- '\\n' + (tool | tojson) -}}{%- endfor -%}"
# One line per tool, `name(arg: type, ...) - description` (envace.toolcall.render_signature writes the same).
_SIGNATURE_TOOLS = (
    "{%- for tool in tools -%}"
    "{%- set fn = tool.function if tool.function is defined else tool -%}"
    "{%- set params = fn.parameters if fn.parameters is defined and fn.parameters else {} -%}"
    "{%- set props = params.properties if params.properties is defined and params.properties else {} -%}"
    "{{- '\\n' + fn.name + '(' -}}"
    "{%- for key, spec in props.items() -%}"
    "{%- if not loop.first -%}{{- ', ' -}}{%- endif -%}"
    "{{- key + ': ' + (spec.type if spec.type is defined else 'any') -}}"
    "{%- endfor -%}"
    "{{- ')' -}}"
    "{%- if fn.description is defined and fn.description -%}{{- ' - ' + fn.description -}}{%- endif -%}"
    "{%- endfor -%}"
)

_TEMPLATE_SRC = (
    "{%- set ns = namespace(start=0) -%}"
    "{%- if tools -%}"
    "{{- '<|im_start|>system\\n' -}}"
    "{%- if messages and messages[0].role == 'system' -%}"
    "{%- set ns.start = 1 -%}"
    "{{- messages[0].content + '\\n\\n' -}}"
    "{%- endif -%}"
    "__HEADER__"
    "__TOOLS__"
    "__FOOTER__"
    "{%- endif -%}"
    "{%- for message in messages[ns.start:] -%}"
    "{%- if message.content is string -%}{%- set content = message.content -%}"
    "{%- else -%}{%- set content = '' -%}{%- endif -%}"
    "{%- if message.role == 'assistant' -%}"
    "{{- '<|im_start|>assistant\\n' + content -}}"
    "{%- for call in (message.tool_calls or []) -%}"
    "{%- if (loop.first and content) or not loop.first -%}{{- '\\n' -}}{%- endif -%}"
    "{%- if call.function is defined and call.function -%}{%- set call = call.function -%}{%- endif -%}"
    "{{- '<tool_call>\\n{\"name\": ' + (call.name | tojson) + ', \"arguments\": ' -}}"
    "{%- if call.arguments is string -%}{{- call.arguments -}}"
    "{%- else -%}{{- call.arguments | tojson -}}{%- endif -%}"
    "{{- '}\\n</tool_call>' -}}"
    "{%- endfor -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- elif message.role == 'tool' -%}"
    "{%- if loop.first or loop.previtem.role != 'tool' -%}{{- '<|im_start|>user' -}}{%- endif -%}"
    "{{- '\\n<tool_response>\\n' + content + '\\n</tool_response>' -}}"
    "{%- if loop.last or loop.nextitem.role != 'tool' -%}{{- '<|im_end|>\\n' -}}{%- endif -%}"
    "{%- else -%}"
    "{{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)



def _template(header: str, tools: str, footer: str) -> str:
    return (_TEMPLATE_SRC.replace("__HEADER__", "{{- " + repr(header) + " -}}").replace("__TOOLS__", tools)
            .replace("__FOOTER__", "{{- " + repr(footer) + " + '<|im_end|>\\n' -}}"))


CHAT_TEMPLATE = _template(TOOLS_HEADER, _JSON_TOOLS, TOOLS_FOOTER)
# The embedded default: tools as one-line signatures instead of JSON schemas. Departure from Qwen3,
# which prints the full JSON: that block was ~75 % of every Act prompt of the tool world (~400 tokens).
CHAT_TEMPLATE_COMPACT = _template(COMPACT_TOOLS_HEADER, _SIGNATURE_TOOLS, COMPACT_TOOLS_FOOTER)
TEMPLATES = {"json": CHAT_TEMPLATE, "signature": CHAT_TEMPLATE_COMPACT}
