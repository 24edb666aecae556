"""Griffe extension for the API pages: our docstrings are Sphinx-flavoured; show them as Markdown.

- roles such as :class:`~torchrl_mask.MaskablePPO` become inline code (``MaskablePPO``; without ``~``, the full path);
- an ``Example:`` section of ``>>>`` lines becomes a highlighted ``pycon`` code block;
- an rST simple table (rows of ``=`` rules) and a ``::`` literal block become preformatted text;
- a ``.. code-block:: python`` directive becomes a highlighted ``python`` code block;
- text after the ``:param:``/``:return:``/``:raises:`` fields (an example, say) moves above them: griffe's Sphinx
  parser would otherwise fold it into the last field.
"""

from __future__ import annotations

import re
import textwrap
from typing import Any

import griffe

ROLE = re.compile(r":(?:class|func|meth|attr|mod|data|exc|obj|const):`(~?)([^`]+)`")
SECTION = re.compile(r"^(Examples?):\s*$")
RULE = re.compile(r"^=+( +=+)+\s*$")
CODE_BLOCK = re.compile(r"^\.\. code-block::\s*(\w*)\s*$")
FIELD = re.compile(r"^:(param|type|return|returns|rtype|raises?|yields?|var|ivar|cvar)\b")


def _role(match: re.Match[str]) -> str:
    tilde, target = match.groups()
    return f"`{target.rsplit('.', 1)[-1] if tilde else target}`"


def _indented_block(lines: list[str], start: int) -> int:
    """Index just past the indented block that starts at ``start`` (blank lines inside it included)."""
    end = start
    while end < len(lines) and (not lines[end].strip() or lines[end].startswith("    ")):
        end += 1
    while end > start and not lines[end - 1].strip():
        end -= 1
    return end


def _fields_last(lines: list[str]) -> list[str]:
    """``lines`` with any unindented text that follows the field list moved to just before it."""
    start = next((i for i, line in enumerate(lines) if FIELD.match(line)), None)
    if start is None:
        return lines
    end = start
    while end < len(lines) and (FIELD.match(lines[end]) or lines[end].startswith((" ", "\t"))):
        end += 1
    tail = lines[end:]
    if not any(line.strip() for line in tail):
        return lines
    while tail and not tail[0].strip():
        tail = tail[1:]
    return [*lines[:start], *tail, "", *lines[start:end]]


def to_markdown(text: str) -> str:
    """Rewrite a Sphinx-flavoured docstring as Markdown (see the module docstring)."""
    text = ROLE.sub(_role, text)
    lines = _fields_last(text.splitlines())
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        section = SECTION.match(line)
        if section and i + 1 < len(lines) and lines[i + 1].startswith("    "):
            end = _indented_block(lines, i + 1)
            block = textwrap.dedent("\n".join(lines[i + 1 : end]))
            out += [f"**{section.group(1)}**", "", "```pycon", *block.splitlines(), "```"]
            i = end
        elif (directive := CODE_BLOCK.match(line)) and i + 2 < len(lines) and not lines[i + 1].strip():
            end = _indented_block(lines, i + 2)
            language = directive.group(1) or "text"
            out += [f"```{language}", *textwrap.dedent("\n".join(lines[i + 2 : end])).splitlines(), "```"]
            i = end
        elif RULE.match(line):
            rules = [j for j in range(i, len(lines)) if RULE.match(lines[j])][:3]
            end = rules[-1] + 1
            out += ["```text", *lines[i:end], "```"]
            i = end
        elif line.rstrip().endswith("::") and i + 2 < len(lines) and not lines[i + 1].strip():
            end = _indented_block(lines, i + 2)
            out += [
                line.rstrip()[:-1],
                "",
                "```text",
                *textwrap.dedent("\n".join(lines[i + 2 : end])).splitlines(),
                "```",
            ]
            i = end
        else:
            out.append(line)
            i += 1
    return "\n".join(out)


class SphinxText(griffe.Extension):
    """Rewrites every docstring with :func:`to_markdown` as griffe loads it."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = to_markdown(obj.docstring.value)
