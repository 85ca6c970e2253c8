"""Suites, their instruction templates, and the answer extraction the papers use.

A template holds `{prompt}` where the item's body goes (plain replacement, so
LaTeX braces in a template need no escaping). The math instruction is the one
of the Qwen2.5-Math / DeepSeek-R1 evaluations the seed papers follow; the
rendered text is then wrapped in the tokenizer's chat template (a user turn and
the assistant header) unless `chat_template` is off.
"""

from __future__ import annotations

import dataclasses
import re

from rlvr_jax.eval.benchmarks import MATH_BENCHMARKS, SCIENCE_BENCHMARKS, Benchmark
from rlvr_jax.eval.code_benchmarks import CODE_BENCHMARKS
from rlvr_jax.eval.items import LETTERS
from rlvr_jax.tasks.base import MAX_RESPONSE_CHARS, extract_answer

MATH_TEMPLATE = "{prompt}\nPlease reason step by step, and put your final answer within \\boxed{}."
CHOICE_TEMPLATE = (
    "{prompt}\n\nPlease reason step by step, and put the letter of the correct option "
    "within \\boxed{} (for example \\boxed{A})."
)
CODE_TEMPLATE = (
    "{prompt}\n\nWrite a complete Python 3 program. Put the final program in one "
    "```python code block at the end of your answer."
)


@dataclasses.dataclass(frozen=True)
class Suite:
    """A named list of benchmarks and the instruction template their prompts use."""

    name: str
    benchmarks: tuple[Benchmark, ...]
    template: str

    def benchmark(self, name: str) -> Benchmark:
        for b in self.benchmarks:
            if b.name == name:
                return b
        raise ValueError(
            f"suite {self.name!r} has no benchmark {name!r}; "
            f"valid: {[b.name for b in self.benchmarks]}"
        )


SUITES = {
    "math": Suite("math", MATH_BENCHMARKS, MATH_TEMPLATE),
    "science": Suite("science", SCIENCE_BENCHMARKS, CHOICE_TEMPLATE),
    "code": Suite("code", CODE_BENCHMARKS, CODE_TEMPLATE),
}


def get_suite(name: str) -> Suite:
    """The suite called `name`; ValueError listing the valid names."""
    if name not in SUITES:
        raise ValueError(f"unknown suite {name!r}; valid: {sorted(SUITES)}")
    return SUITES[name]


def render(template: str, body: str) -> str:
    """`template` with its `{prompt}` replaced by `body`; ValueError if it has no `{prompt}`."""
    if "{prompt}" not in template:
        raise ValueError(f"a prompt template must contain {{prompt}}; got {template!r}")
    return template.replace("{prompt}", body)


# ---------------------------------------------------------------- extraction

_LETTER_IN_BOX = re.compile(r"^\s*(?:\\(?:text|textbf|mathrm)\{\s*)?\(?\s*([A-J])(?![A-Za-z])")
_ANSWER_LETTER = re.compile(r"(?i:answer)\s*(?:is\s*)?[:=]?\s*\**\s*\(?\s*([A-J])(?![A-Za-z])")
_FENCE = re.compile(r"```([A-Za-z0-9_+-]*)[ \t]*\n(.*?)```", re.S)


def extract_letter(response: str, num_options: int) -> str | None:
    """The option letter a response answers: the last \\boxed{X}, else the last "Answer: X".

    Accepts \\boxed{B}, \\boxed{(B)}, \\boxed{\\text{B}}, \\boxed{B) text}, "Answer: B",
    "the answer is (B)"; only letters of the first `num_options` count.

    Returns:
      The letter, or None when the response names none.
    """
    valid = LETTERS[:num_options]
    boxed = extract_answer(response) if "\\boxed{" in response[-MAX_RESPONSE_CHARS:] else None
    m = _LETTER_IN_BOX.match(boxed) if boxed else None
    if m and m.group(1) in valid:
        return m.group(1)
    matches = [m for m in _ANSWER_LETTER.findall(response[-MAX_RESPONSE_CHARS:]) if m in valid]
    return matches[-1] if matches else None


def extract_program(response: str) -> str | None:
    """The program of a response: its last ```python (or untagged ```) fenced block.

    Returns:
      The block's text, or None when the response has no closed fenced block
      (a program cut off by the token budget is not run).
    """
    blocks = [(lang.lower(), code) for lang, code in _FENCE.findall(response)]
    python = [c for lang, c in blocks if lang in ("python", "py", "python3", "")]
    return python[-1] if python else None
