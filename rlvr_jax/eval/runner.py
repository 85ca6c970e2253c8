"""Sampling a policy on a suite's benchmarks, scoring, caching and summarising.

`run_suite` is the library call (a trainer passes its live model and tokenizer);
`evaluate_models` loads saved model directories, runs the suite on each into one
output directory and writes the paper-style report (`report.py`).

A problem's samples depend only on (model, settings, seed, benchmark, the problem):
  engine "paged" (default)  problems are sampled `prompts_per_batch` at a time on the
            paged engine, each problem's n rows sharing one prefill of its prompt.
            The engine keys a row's draws by its row id alone, and the rows of the
            i-th problem of a benchmark file have ids i·n … i·n + n − 1 under the
            key fold_in(PRNGKey(seed), hash(benchmark)): no draw depends on the
            other problems of the call.
  engine "static"  each problem is sampled in its own call of the static sampler
            with the key fold_in(PRNGKey(seed), hash(benchmark/id)).
Either way a resumed run, a `num_problems` prefix and an uninterrupted run give
the same samples for the same problem (the engine is part of the cache key).
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np

from rlvr_jax import distributed
from rlvr_jax.eval import metrics, report
from rlvr_jax.eval.benchmarks import Benchmark
from rlvr_jax.eval.cache import ResultCache, model_digest, problem_key
from rlvr_jax.eval.items import Item
from rlvr_jax.eval.progress import Progress
from rlvr_jax.eval.prompts import Suite, get_suite, render
from rlvr_jax.eval.scoring import CodeScorer, SampleScore, score_choice, score_math
from rlvr_jax.models import load_pretrained
from rlvr_jax.sampling import Sampler, SamplingParams
from rlvr_jax.tokenizers import Tokenizer, cut_at_stop, encode_prompt
from rlvr_jax.train.eval_checkpoint import resolve_model_dir
from rlvr_jax.train.warmstart import load_model_tokenizer

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Settings:
    """How a suite is evaluated; every field is written into the output.

    Attributes:
      n_samples: n, responses per problem.
      ks: the k of pass@k and maj@k (each <= n); avg@n is always reported.
      temperature: sampling temperature (0 = greedy).
      top_p: nucleus mass (1 = off).
      max_new_tokens: decode budget per response.
      seed: sampling seed; also fixes GPQA's option order and the bootstrap.
      num_problems: the first this many problems of each benchmark (None = all).
      benchmarks: names of the suite's benchmarks to run (() = every one found).
      template: the instruction template with {prompt} (None = the suite's).
      chat_template: wrap the prompt in the tokenizer's chat template.
      math_timeout_s: math-verify's limit per answer check.
      code_workers: sandbox pool concurrency (code suite).
      code_limits: keyword arguments of the sandbox's Limits (() = its defaults).
      engine: "paged" (problems batched on the paged engine) or "static" (one
        static-sampler call per problem); see the module docstring.
      prompts_per_batch: problems per paged-engine call (rows = this x n); changes
        speed and memory, not the samples.
      cache_gib: the paged engine's page pool in GiB (None: enough for every decode
        slot to hold a whole row); rows wait for pages, the samples do not change.
      on_bad_row: "raise" on a malformed row, or "skip" (counted and logged).
    """

    n_samples: int = 4
    ks: tuple[int, ...] = (1,)
    temperature: float = 0.6
    top_p: float = 1.0
    max_new_tokens: int = 2048
    seed: int = 0
    num_problems: int | None = None
    benchmarks: tuple[str, ...] = ()
    template: str | None = None
    chat_template: bool = True
    math_timeout_s: float = 1.0
    code_workers: int = 4
    code_limits: tuple[tuple[str, Any], ...] = ()
    on_bad_row: str = "raise"
    engine: str = "paged"
    prompts_per_batch: int = 16
    cache_gib: float | None = None

    def __post_init__(self):
        if self.engine not in ("paged", "static"):
            raise ValueError(f"engine must be 'paged' or 'static', got {self.engine!r}")
        if self.prompts_per_batch < 1:
            raise ValueError(f"prompts_per_batch must be >= 1, got {self.prompts_per_batch}")
        if self.n_samples < 1:
            raise ValueError(f"n_samples must be >= 1, got {self.n_samples}")
        bad = [k for k in self.ks if not 1 <= k <= self.n_samples]
        if bad or not self.ks:
            raise ValueError(f"every k must be in [1, n_samples={self.n_samples}]; got {self.ks}")
        if self.num_problems is not None and self.num_problems < 1:
            raise ValueError(f"num_problems must be >= 1 or None, got {self.num_problems}")

    def sample_key(self) -> dict[str, Any]:
        """The fields that change a problem's samples or verdicts (part of the cache key)."""
        keep = ("n_samples", "temperature", "top_p", "max_new_tokens", "seed", "chat_template",
                "math_timeout_s", "code_limits")  # fmt: skip
        out = {k: getattr(self, k) for k in keep}
        out["engine"] = self.engine
        out["votes"] = "equivalence"  # math votes group equivalent answers (scoring.math_votes)
        return out


def _hashed_rng(seed: int, name: str) -> jax.Array:
    """fold_in(PRNGKey(seed), 31 bits of sha256(name))."""
    digest = hashlib.sha256(name.encode()).digest()
    return jax.random.fold_in(jax.random.PRNGKey(seed), int.from_bytes(digest[:4], "big") >> 1)


def _problem_rng(seed: int, benchmark: str, item_id: str) -> jax.Array:
    return _hashed_rng(seed, f"{benchmark}/{item_id}")


def load_suite_items(
    suite: Suite, data_dir, settings: Settings
) -> tuple[list[tuple[Benchmark, list[Item], int]], list[str]]:
    """The items of each benchmark found under `data_dir`, and the names not found.

    Raises:
      FileNotFoundError when a benchmark named in `settings.benchmarks` is absent,
      or when no benchmark of the suite is present (saying where it looked).
    """
    chosen = [suite.benchmark(n) for n in settings.benchmarks] or list(suite.benchmarks)
    loaded, missing = [], []
    for b in chosen:
        if not b.files(Path(data_dir)):
            if settings.benchmarks:
                raise FileNotFoundError(b.missing_message(Path(data_dir)))
            missing.append(b)
            continue
        items, skipped = b.load(Path(data_dir), seed=settings.seed, on_bad_row=settings.on_bad_row)
        loaded.append((b, items[: settings.num_problems], skipped))
    if not loaded:
        raise FileNotFoundError(
            f"suite {suite.name!r}: no benchmark files under {data_dir}:\n  "
            + "\n  ".join(b.missing_message(Path(data_dir)) for b in missing)
        )
    for b in missing:
        logger.warning("suite %s: %s is not in %s; left out", suite.name, b.name, data_dir)
    return loaded, [b.name for b in missing]


def run_suite(
    model,
    tokenizer: Tokenizer,
    suite: str | Suite,
    data_dir,
    settings: Settings = Settings(),
    *,
    model_id: str | None = None,
    cache_dir=None,
    code_scorer: CodeScorer | None = None,
    generate: Callable[[list[int], jax.Array], list[str]] | None = None,
    show_progress: bool = True,
    label: str = "",
    split_processes: bool = False,
) -> dict[str, Any]:
    """Samples, scores and summarises one policy on a suite.

    Args:
      model: the policy (rlvr_jax Transformer).
      tokenizer: its tokenizer (chat template, stop ids, decoding).
      suite: a suite name ("math", "science", "code") or a Suite.
      data_dir: the directory holding the benchmarks' downloaded files.
      settings: sampling and scoring settings.
      model_id: names the policy in the cache key (a model digest, or a run's
        "workdir@step"); None with cache_dir is an error.
      cache_dir: per-problem results are read from and appended to
        `<cache_dir>/<benchmark>.jsonl` (None: no cache).
      code_scorer: runs programs (default: a CodeScorer on rlvr_jax.sandbox).
      generate: (prompt ids, key) -> n response texts, replacing the Sampler on
        `model` (another engine, or a scripted policy in tests); None: sample `model`
        (`sampler_generate`).
      show_progress: draw the progress bar on stderr.
      label: shown before the benchmark name in the progress bar (the model).
      split_processes: in a multi-process run (a collective: every process calls it),
        the problems are shared out over the processes (`_sample_split`; needs
        engine "static"), every process returns the whole result and process 0
        writes the cache. Without it every process samples every problem.
    Returns:
      {"suite", "settings", "benchmarks": {name: {"title", "kind", "num_problems",
      "skipped_rows", "metrics", "pass_curve", "problems"}}, "average": {metric:
      {"value", "se"}}, "missing": [benchmarks not in data_dir]}.
    """
    suite = get_suite(suite) if isinstance(suite, str) else suite
    if cache_dir is not None and model_id is None:
        raise ValueError("a cache needs model_id (e.g. cache.model_digest(model_dir))")
    template = settings.template or suite.template
    loaded, missing = load_suite_items(suite, data_dir, settings)
    n = settings.n_samples
    code_scorer = code_scorer or CodeScorer(settings.code_workers, dict(settings.code_limits))
    if any(b.kind == "code" for b, _, _ in loaded):
        code_scorer.check()  # refuse before sampling when programs cannot be isolated
    total = sum(len(items) for _, items, _ in loaded) * n
    split = split_processes and jax.process_count() > 1
    if split and (settings.engine != "static" or generate is not None):
        raise ValueError(
            "a suite split over processes samples with engine='static' and the model (the "
            "paged engine and a generate= hook run in one process)"
        )
    key_settings = settings.sample_key()
    if split:  # a problem's samples depend on how many processes share its call
        key_settings["processes"] = jax.process_count()
    plan = []
    for bench, items, skipped in loaded:
        cache = ResultCache(Path(cache_dir) / f"{bench.name}.jsonl") if cache_dir else None
        texts = [render(template, item.body) for item in items]
        keys = [problem_key(model_id or "", bench.name, item.id, key_settings, text)
                for item, text in zip(items, texts, strict=True)]  # fmt: skip
        records = [cache.get(k) if cache is not None else None for k in keys]
        plan.append(_BenchPlan(bench, items, texts, keys, skipped, cache, records))
    if split:  # every process takes process 0's cache (a collective)
        gathered = distributed.allgather_objects([p.records for p in plan])[0]
        for entry, records in zip(plan, gathered, strict=True):
            entry.records = records
    if generate is not None:
        sample = _per_problem(generate, settings)
    else:
        longest = max((len(p.prompt_ids(i, tokenizer, settings)) for p in plan for i in p.todo()),
                      default=0)  # fmt: skip
        sample = _lazy_sampler(model, tokenizer, settings, longest)
    results = {}
    batch = settings.prompts_per_batch if generate is None and settings.engine == "paged" else 1
    with Progress(total, label=suite.name, stream=None if show_progress else _Null()) as bar:
        for p in plan:
            todo = p.todo()
            bar.skip(n * (len(p.records) - len(todo)))
            where = f"{label}{suite.name}/{p.bench.name}"
            if split:
                _sample_split(p, todo, model, tokenizer, settings, code_scorer, bar, where)
                todo = []
            for lo in range(0, len(todo), batch):
                part = todo[lo : lo + batch]
                prompts = [p.prompt_ids(i, tokenizer, settings) for i in part]
                responses = sample(p.bench.name, [(i, p.items[i]) for i in part], prompts)
                for i, res in zip(part, responses, strict=True):
                    if len(res) != n:
                        raise ValueError(f"generate returned {len(res)} responses, not {n}")
                    p.put(i, _record(p.items[i], res, tokenizer, settings, code_scorer))
                bar.advance(n * len(part), where)
            results[p.bench.name] = _summarise(p.bench, p.records, p.skipped, settings)
    return {
        "suite": suite.name,
        "settings": {**dataclasses.asdict(settings), "template": template},
        "benchmarks": results,
        "average": metrics.average_row([r["metrics"] for r in results.values()]),
        "missing": missing,
    }


def _sample_split(
    plan: _BenchPlan,
    todo: list[int],
    model,
    tokenizer,
    settings: Settings,
    code_scorer,
    bar,
    label: str,
) -> None:
    """A benchmark's uncached problems (`todo`) sampled by every process at once (a
    collective).

    Problems go to processes in calls of P (the process count) by position: call c
    holds problems c·P … c·P + P − 1, process j samples problem c·P + j with the key
    fold_in(fold_in(PRNGKey(seed), hash(benchmark)), c) and scores it; the records
    are gathered into `plan.records` on every process and process 0 appends them to
    the cache. One static-sampler program runs over every process's rows, so a
    problem's samples depend on the process count (part of the cache key) but not
    on what was cached: a resumed run samples as an uninterrupted one. A call's
    positions past the benchmark's end repeat its first problem (dropped).
    """
    procs, me, n = jax.process_count(), jax.process_index(), settings.n_samples
    uncached, size = set(todo), len(plan.items)
    generate = None
    for c in range(-(-size // procs)):
        call = [p for p in range(c * procs, (c + 1) * procs) if p < size]
        if not uncached.intersection(call):
            continue
        generate = generate or sampler_generate(model, tokenizer, settings)
        mine = c * procs + me if c * procs + me < size else call[0]
        key = jax.random.fold_in(_benchmark_rng(settings.seed, plan.bench.name), c)
        responses = generate(plan.prompt_ids(mine, tokenizer, settings), key)
        own = {}
        if mine == c * procs + me and mine in uncached:
            own[mine] = _record(plan.items[mine], responses, tokenizer, settings, code_scorer)
        for part in distributed.allgather_objects(own):
            for pos, rec in part.items():
                plan.put(pos, rec, write=me == 0)
        bar.advance(n * len(uncached.intersection(call)), label)


@dataclasses.dataclass
class _BenchPlan:
    """One benchmark's share of a suite run: its problems, their cache keys and records.

    `records[i]` is problem i's record, None until it is read from the cache or
    sampled; each prompt is rendered once and encoded at most once (`prompt_ids`).
    """

    bench: Benchmark
    items: list[Item]
    texts: list[str]
    keys: list[str]
    skipped: int
    cache: ResultCache | None
    records: list[dict | None]
    encoded: dict[int, list[int]] = dataclasses.field(default_factory=dict)

    def todo(self) -> list[int]:
        """The positions still to sample, in file order."""
        return [i for i, r in enumerate(self.records) if r is None]

    def prompt_ids(self, i: int, tokenizer, settings: Settings) -> list[int]:
        if i not in self.encoded:
            self.encoded[i] = _encode(tokenizer, self.texts[i], settings)
        return self.encoded[i]

    def put(self, i: int, record: dict, *, write: bool = True) -> None:
        """Problem i's record, appended to the cache when there is one and `write`."""
        self.records[i] = record
        if self.cache is not None and write:
            self.cache.put(self.keys[i], record)


def _encode(tokenizer, text: str, settings: Settings) -> list[int]:
    return encode_prompt(tokenizer, text) if settings.chat_template else tokenizer.encode(text)


def _record(item: Item, responses, tokenizer, settings: Settings, code_scorer) -> dict[str, Any]:
    """One problem's record: its n responses, their lengths and verdicts."""
    responses = list(responses)
    scores = _score(item, responses, settings, code_scorer)
    return {
        "id": item.id,
        "responses": responses,
        "lengths": [len(tokenizer.encode(r)) for r in responses],  # re-encoded response tokens
        "scores": [s.to_json() for s in scores],
    }


def _per_problem(generate, settings: Settings):
    """A per-prompt `generate(ids, key)` as the batched call: one call per problem, keyed
    fold_in(PRNGKey(seed), hash(benchmark/id))."""

    def sample(bench: str, items, prompts) -> list[list[str]]:
        return [list(generate(ids, _problem_rng(settings.seed, bench, item.id)))
                for (_, item), ids in zip(items, prompts, strict=True)]  # fmt: skip

    return sample


def _benchmark_rng(seed: int, benchmark: str) -> jax.Array:
    return _hashed_rng(seed, benchmark)


def engine_generate(model, tokenizer: Tokenizer, settings: Settings, max_length: int):
    """(benchmark, [(index, item)], prompt ids) -> n decoded responses per problem, sampled
    together on the paged engine; problem i's rows have ids i·n … i·n + n − 1.

    Args:
      max_length: the engine's longest row (prompt + `settings.max_new_tokens`).
    """
    n = settings.n_samples
    params = SamplingParams(
        temperature=settings.temperature, top_p=settings.top_p,
        max_new_tokens=settings.max_new_tokens, stop_token_ids=tokenizer.stop_ids, n=n,
    )  # fmt: skip
    cache = None if settings.cache_gib is None else settings.cache_gib * 2**30
    sampler = Sampler(
        model, pad_id=tokenizer.pad_id if tokenizer.pad_id is not None else 0,
        max_length=max_length, engine="paged", cache_bytes=cache,
        decode_slots=min(64, settings.prompts_per_batch * n),
    )  # fmt: skip

    def sample(bench: str, items, prompts) -> list[list[str]]:
        row_ids = [i * n + s for i, _ in items for s in range(n)]  # Request checks < 2**31
        ro = sampler.sample(prompts, params, _benchmark_rng(settings.seed, bench), row_ids=row_ids)
        texts = [tokenizer.decode(cut_at_stop(ro.sampled_tokens(b), tokenizer.stop_ids))
                 for b in range(len(row_ids))]  # fmt: skip
        return [texts[g * n : (g + 1) * n] for g in range(len(items))]

    return sample


def sampler_generate(model, tokenizer: Tokenizer, settings: Settings):
    """(prompt ids, key) -> `settings.n_samples` decoded responses, sampled from `model`.

    Each response is cut before its first stop token, as training scores it.
    """
    params = SamplingParams(
        temperature=settings.temperature, top_p=settings.top_p,
        max_new_tokens=settings.max_new_tokens, stop_token_ids=tokenizer.stop_ids,
        n=settings.n_samples,
    )  # fmt: skip
    sampler = Sampler(model, pad_id=tokenizer.pad_id if tokenizer.pad_id is not None else 0)

    def generate(ids: list[int], key: jax.Array) -> list[str]:
        rollout = sampler.sample([ids], params, key)
        return [
            tokenizer.decode(cut_at_stop(rollout.sampled_tokens(b), tokenizer.stop_ids))
            for b in range(params.n)
        ]

    return generate


def _lazy_sampler(model, tokenizer: Tokenizer, settings: Settings, longest_prompt: int):
    """The batched sampling call of `settings.engine`, built on the first uncached problems
    (a resumed run builds none)."""
    built = []

    def sample(bench: str, items, prompts) -> list[list[str]]:
        if not built:
            if settings.engine == "paged":
                limit = model.config.max_position_embeddings
                length = min(limit, longest_prompt + settings.max_new_tokens)
                built.append(engine_generate(model, tokenizer, settings, length))
            else:
                gen = sampler_generate(model, tokenizer, settings)
                built.append(_per_problem(gen, settings))
        return built[0](bench, items, prompts)

    return sample


class _Null:
    def write(self, _):
        pass

    def flush(self):
        pass


def _score(
    item: Item, responses: Sequence[str], settings: Settings, code: CodeScorer
) -> list[SampleScore]:
    if item.kind == "math":
        return score_math(item, responses, timeout_s=settings.math_timeout_s)
    if item.kind == "choice":
        return score_choice(item, responses)
    return code.score(item, responses)


def _summarise(bench: Benchmark, records: list[dict], skipped: int, settings: Settings) -> dict:
    correct = np.array([[s["correct"] for s in r["scores"]] for r in records], bool)
    scores = np.array([[s["score"] for s in r["scores"]] for r in records], np.float64)
    votes = None if bench.kind == "code" else [[s["vote"] for s in r["scores"]] for r in records]
    problems = [
        {"id": r["id"], "num_correct": int(sum(s["correct"] for s in r["scores"])),
         "statuses": [s["status"] for s in r["scores"]], "mean_length": float(np.mean(r["lengths"])),  # noqa: E501
         "example": r["responses"][0][:2000]}
        for r in records
    ]  # fmt: skip
    return {
        "title": bench.title,
        "kind": bench.kind,
        "num_problems": len(records),
        "skipped_rows": skipped,
        "metrics": metrics.benchmark_metrics(
            correct, scores, votes, settings.ks, seed=settings.seed
        ),
        "pass_curve": metrics.pass_curve(correct),
        "problems": problems,
    }


def model_label(model_dir: Path) -> str:
    """A short column name for a model directory: its name, or its run's name for export/."""
    path = Path(model_dir)
    return path.parent.name if path.name == "export" else path.name


def evaluate_models(
    model_dirs: Sequence,
    suite: str,
    data_dir,
    settings: Settings = Settings(),
    out_dir=None,
    *,
    code_scorer: CodeScorer | None = None,
    show_progress: bool = True,
) -> dict[str, Any]:
    """Runs `suite` on each saved model and writes one paper-style report.

    Args:
      model_dirs: Hugging Face-format model directories or run workdirs (export/).
      suite: suite name.
      data_dir: the benchmarks' downloaded files.
      settings: shared by every model.
      out_dir: where results.json, table.md, pass_at_k.png and cache/ go (None: no files).
      code_scorer: as in `run_suite`.
      show_progress: draw the progress bar.
    Returns:
      {"suite", "settings", "models": [{"label", "model_dir", "digest", "result"}],
      "table": the markdown}.
    """
    if not model_dirs:
        raise ValueError("give at least one model directory")
    out = Path(out_dir) if out_dir is not None else None
    models, labels = [], []
    for raw in model_dirs:
        path = resolve_model_dir(raw)
        digest = model_digest(path)
        label = model_label(path)
        labels.append(label if label not in labels else f"{label}-{len(labels)}")
        model, _ = load_pretrained(path)
        tokenizer = load_model_tokenizer(path)
        cache = out / "cache" / digest[:16] if out is not None else None
        result = run_suite(
            model, tokenizer, suite, data_dir, settings, model_id=digest, cache_dir=cache,
            code_scorer=code_scorer, show_progress=show_progress, label=f"{labels[-1]} ",
        )  # fmt: skip
        models.append(
            {"label": labels[-1], "model_dir": str(path), "digest": digest, "result": result}
        )
    full = {"suite": suite, "settings": models[0]["result"]["settings"], "models": models}
    full["table"] = report.markdown(full)
    if out is not None:
        report.write(full, out)
    return full
