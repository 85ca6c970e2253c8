"""Code benchmarks: LiveCodeBench (code_generation_lite), HumanEval+ and MBPP+ (EvalPlus).

LiveCodeBench rows hold `public_test_cases` as a JSON string (a list of
{input, output, testtype}) and `private_test_cases` either as JSON or, in the
lite release, as base64(zlib(pickle(JSON string))). A pickle from a downloaded
file could run code when loaded, so it is read with an unpickler that refuses
every global: only the plain string the release stores can come out.
"functional" tests (LeetCode) call `Solution().<metadata.func_name>` with the
input's JSON lines as arguments.
"""

from __future__ import annotations

import base64
import binascii
import io
import json
import pickle
import zlib

from rlvr_jax.eval.benchmarks import Benchmark, _row_id
from rlvr_jax.eval.items import CodeTest, Item
from rlvr_jax.eval.rows import BadRow, field, json_field, text_field


class _NoGlobals(pickle.Unpickler):
    """An unpickler that builds only primitive values (str, list, dict, numbers)."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"refusing global {module}.{name}")


def decode_private_tests(value) -> list:
    """LiveCodeBench's `private_test_cases` as a list of test dicts.

    Accepts a list, a JSON string, or the lite release's base64(zlib(pickle(JSON))).

    Raises:
      BadRow naming the field when none of these decodes.
    """
    if isinstance(value, list):
        return value
    if not isinstance(value, str) or not value.strip():
        return []
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        pass
    try:
        raw = zlib.decompress(base64.b64decode(value, validate=False))
        inner = _NoGlobals(io.BytesIO(raw)).load()
        return json.loads(inner) if isinstance(inner, str) else inner
    except (binascii.Error, zlib.error, pickle.UnpicklingError, EOFError, ValueError) as e:
        raise BadRow(f"field 'private_test_cases' does not decode ({type(e).__name__}: {e})") from e


def _lcb_test(case, func_name: str, which: str, k: int) -> CodeTest:
    if not isinstance(case, dict) or not {"input", "output"} <= set(case):
        raise BadRow(f"field {which!r} test {k} must be an object with 'input' and 'output'")
    kind = case.get("testtype", "stdin")
    if kind == "stdin":
        return CodeTest(stdin=str(case["input"]), expected_stdout=str(case["output"]))
    if kind == "functional":
        if not func_name:
            raise BadRow(f"field {which!r} test {k} is functional but metadata has no func_name")
        args = repr(str(case["input"]))
        want = repr(str(case["output"]))
        return CodeTest(
            assertion=(
                "import json\n"
                f"_args = [json.loads(a) for a in {args}.splitlines() if a.strip()]\n"
                f"assert Solution().{func_name}(*_args) == json.loads({want})"
            )
        )
    raise BadRow(f"field {which!r} test {k} has testtype {kind!r}; valid: stdin, functional")


LCB_INSTRUCTION_STDIN = (
    "Read the input from standard input and write the answer to standard output."
)
LCB_INSTRUCTION_STARTER = "Complete the following starter code."


def livecodebench_item(row: dict, where: str, seed: int) -> Item:
    """livecodebench/code_generation_lite row: question_content, starter_code, tests, metadata."""
    del seed
    content = text_field(row, ("question_content",))
    starter = text_field(row, ("starter_code",), required=False) or ""
    meta_raw = field(row, ("metadata",), required=False) or "{}"
    try:
        meta = json.loads(meta_raw) if isinstance(meta_raw, str) else dict(meta_raw)
    except (json.JSONDecodeError, TypeError, ValueError) as e:
        raise BadRow(f"field 'metadata' is not a JSON object ({e})") from e
    func = str(meta.get("func_name", "") or "")
    public = json_field(row, ("public_test_cases",))
    private = decode_private_tests(row.get("private_test_cases"))
    if not isinstance(public, list):
        raise BadRow("field 'public_test_cases' must be a JSON list")
    tests = [_lcb_test(c, func, "public_test_cases", k) for k, c in enumerate(public)]
    tests += [_lcb_test(c, func, "private_test_cases", k) for k, c in enumerate(private)]
    if not tests:
        raise BadRow("no tests in fields 'public_test_cases' and 'private_test_cases'")
    if starter:
        body = f"{content}\n\n{LCB_INSTRUCTION_STARTER}\n```python\n{starter}\n```"
    else:
        body = f"{content}\n\n{LCB_INSTRUCTION_STDIN}"
    keep = ("question_title", "platform", "difficulty", "contest_date", "contest_id")
    info = {k: str(row[k]) for k in keep if row.get(k) is not None}
    rid = text_field(row, ("question_id",), required=False) or where.replace(" ", "-")
    return Item(rid, "code", body, tests=tuple(tests), metadata=info)


def humanevalplus_item(row: dict, where: str, seed: int) -> Item:
    """evalplus/humanevalplus row: task_id, prompt, entry_point, test (defines check(candidate)).

    The whole `test` script is one test (its check runs every base and plus input),
    so a HumanEval+ program's test pass rate is 0 or 1.
    """
    del seed
    prompt = text_field(row, ("prompt",))
    entry = text_field(row, ("entry_point",))
    test = text_field(row, ("test",))
    body = f"Complete the following Python function.\n```python\n{prompt}\n```"
    script = f"{test}\n\ncheck({entry})"
    prefix = row["prompt"] if row["prompt"].endswith("\n") else row["prompt"] + "\n"
    return Item(
        _row_id({"id": row.get("task_id")}, where), "code", body,
        tests=(CodeTest(assertion=script),), program_prefix=prefix, entry_point=entry,
    )  # fmt: skip


def mbppplus_item(row: dict, where: str, seed: int) -> Item:
    """evalplus/mbppplus row: task_id, prompt, test_imports, test_list, test (the plus inputs).

    Each assert of `test_list` is one test and the `test` script (all plus inputs)
    one more; `test_imports` are put before the program.
    """
    del seed
    prompt = text_field(row, ("prompt",))
    imports = field(row, ("test_imports",), required=False) or []
    asserts = field(row, ("test_list",))
    if not isinstance(imports, (list, tuple)) or not isinstance(asserts, (list, tuple)):
        raise BadRow("fields 'test_imports' and 'test_list' must be lists of strings")
    if not asserts:
        raise BadRow("field 'test_list' is empty")
    tests = [CodeTest(assertion=str(a)) for a in asserts]
    plus = row.get("test")
    if isinstance(plus, str) and plus.strip():  # some rows have no plus script
        tests.append(CodeTest(assertion=plus))
    body = f"{prompt.strip()}\nYour code should pass this test:\n{asserts[0]}"
    prefix = "\n".join(str(i) for i in imports)
    rid = _row_id({"id": row.get("task_id")}, where)
    return Item(rid, "code", body, tests=tuple(tests), program_prefix=prefix)


CODE_BENCHMARKS = (
    Benchmark(
        "livecodebench", "LiveCodeBench", "code",
        ("livecodebench", "code_generation_lite", "lcb"), "test*.jsonl", livecodebench_item,
    ),
    Benchmark(
        "humanevalplus", "HumanEval+", "code",
        ("humanevalplus", "humaneval_plus", "HumanEvalPlus"), "*", humanevalplus_item,
    ),
    Benchmark(
        "mbppplus", "MBPP+", "code", ("mbppplus", "mbpp_plus", "MBPPPlus"), "*", mbppplus_item,
    ),
)  # fmt: skip
