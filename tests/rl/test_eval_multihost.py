"""The trainer's evaluation split over two processes (CPU, jax.distributed).

Each process samples its own share of the problems (`distributed.process_shard`);
the per-problem results are gathered, so both report the result over all of them.
With greedy decoding it equals every process sampling every problem.
"""

import json
import textwrap

import numpy as np
import pytest

from rlvr_jax.distributed import process_shard
from rlvr_jax.testing import launch_processes

_CHILD = textwrap.dedent(
    """
    import json, sys
    from rlvr_jax import distributed
    port, pid, workdir, out = sys.argv[1:]
    assert distributed.initialize(f"localhost:{port}", 2, int(pid), env={})
    from rlvr_jax.rl import trainer as trainer_lib
    from rlvr_jax.rollout import score
    from rlvr_jax.testing import multihost_pulse, parity_score_rows
    from rlvr_jax.train.evaluate import evaluate_task

    seen = []

    def score_rows(task, tokenizer, problems_R, sampled_R, stop_ids):
        seen.extend(p.prompt for p in problems_R)
        return parity_score_rows(task, tokenizer, problems_R, sampled_R, stop_ids)

    score.score_rows = score_rows
    c = multihost_pulse("baselines/grpo.py")
    c.eval.num_problems = 5  # 3 + 2 (one padding entry on process 1)
    c.eval.temperature = 0.0
    t = trainer_lib.Trainer.from_config(c, workdir)
    split = t.evaluate()
    mine = sorted(set(seen))
    seen.clear()
    every = evaluate_task(
        t.parts.model, t.parts.tokenizer, t.parts.task, split=c.eval.split, num_problems=5,
        n_samples=c.eval.n_samples, temperature=0.0, max_new_tokens=c.rollout.max_new_tokens,
        seed=c.seed + 1,
    )
    t.io.close()
    with open(out, "w") as f:
        json.dump(dict(split=split, every=every, mine=mine, all=sorted(set(seen))), f)
    print("DONE", pid)
    """
)


def test_process_shard_gives_every_process_equally_many_problems():
    assert process_shard(5, 0, 2) == [0, 2, 4]
    assert process_shard(5, 1, 2) == [1, 3, 1]  # padded with its first problem
    assert process_shard(1, 1, 2) == [0]  # no problem of its own: problem 0, dropped
    assert process_shard(4, 0, 1) == [0, 1, 2, 3]


@pytest.mark.slow
def test_eval_splits_problems_over_processes_and_gathers_the_counts(tmp_path):
    script = tmp_path / "child.py"
    script.write_text(_CHILD)
    outs = [tmp_path / f"out_{i}.json" for i in range(2)]
    launch_processes(script, lambda i: [str(tmp_path / "run"), str(outs[i])])
    a, b = (json.loads(o.read_text()) for o in outs)
    assert len(a["mine"]) == 3 and len(b["mine"]) == 2
    assert not set(a["mine"]) & set(b["mine"])  # disjoint shares ...
    assert sorted(a["mine"] + b["mine"]) == a["all"] == b["all"]  # ... of all 5 problems
    n = a["split"][f"avg@{a['every']['n_samples']}"]
    for r in (a, b):
        assert r["split"] == a["split"]  # both processes report the gathered result
        assert r["split"]["pass@1"] == pytest.approx(r["every"]["pass@1"])
        assert n == pytest.approx(np.mean(r["every"]["num_correct"]) / r["every"]["n_samples"])
        assert r["split"]["mean_reward"] == pytest.approx(r["every"]["mean_reward"])


_CHILD_GAMES = textwrap.dedent(
    """
    import json, sys
    from rlvr_jax import distributed
    port, pid, workdir, out, experiment = sys.argv[1:]
    assert distributed.initialize(f"localhost:{port}", 2, int(pid), env={})
    import jax
    from rlvr_jax.rl import trainer as trainer_lib
    from rlvr_jax.rollout import EVALUATORS, self_play
    from rlvr_jax.sampling import SamplingParams
    from rlvr_jax.testing import multihost_pulse
    from rlvr_jax.train.multiturn import evaluate_episodes

    seen = []  # the problems this process played (an episode or a game)
    c = multihost_pulse(experiment)
    c.eval.num_problems = 5  # 3 + 2 (one padding entry on process 1)
    c.eval.temperature = 0.0
    t = trainer_lib.Trainer.from_config(c, workdir)
    from rlvr_jax.train import multiturn
    run_episodes = multiturn.run_episodes

    def recording_run_episodes(sampler, tokenizer, problems, *args, **kw):
        seen.extend(p.prompt for p in problems)
        return run_episodes(sampler, tokenizer, problems, *args, **kw)

    multiturn.run_episodes = recording_run_episodes
    player_prompt = self_play.player_prompt
    self_play.player_prompt = lambda problem, p: (
        seen.append(problem.prompt) or player_prompt(problem, p)
    )
    split = t.evaluate()
    mine = sorted(set(seen))
    seen.clear()
    if t.parts.task.episode_turns():  # every process runs every episode
        every = evaluate_episodes(
            t.parts.model, t.parts.tokenizer, t.parts.task, env_factory=t.parts.task.env,
            max_turns=t.parts.task.episode_turns(), split=c.eval.split, num_problems=5,
            n_samples=c.eval.n_samples, temperature=0.0,
            max_new_tokens=c.rollout.max_new_tokens, seed=c.seed + 1,
        )
        every = {k: every[k] for k in ("pass@1", "mean_reward", "mean_turns")}
    else:  # every process plays every game
        params = SamplingParams(
            temperature=0.0, max_new_tokens=c.rollout.max_new_tokens,
            stop_token_ids=t.parts.tokenizer.stop_ids,
        )
        every = EVALUATORS[c.task.name](
            t.parts.sampler, t.parts.tokenizer, t.parts.task.problems(5, c.eval.split), params,
            jax.random.PRNGKey(c.seed + 2), t.parts.frozen_state,
        )
    t.io.close()
    with open(out, "w") as f:
        json.dump(dict(split=split, every=every, mine=mine, all=sorted(set(seen))), f)
    print("DONE", pid)
    """
)


@pytest.mark.slow
@pytest.mark.parametrize("experiment", ["agentic/tool_lookup.py", "spyrl/spyrl.py"])
def test_episodes_and_games_are_split_over_processes(tmp_path, experiment):
    """Multi-turn episodes and SpyRL's games vs the frozen policy: each process plays
    its share, both report the statistics over all problems (greedy: equal to one
    process playing them all)."""
    script = tmp_path / "child.py"
    script.write_text(_CHILD_GAMES)
    outs = [tmp_path / f"out_{i}.json" for i in range(2)]
    launch_processes(script, lambda i: [str(tmp_path / "run"), str(outs[i]), experiment])
    a, b = (json.loads(o.read_text()) for o in outs)
    assert len(a["mine"]) == 3 and len(b["mine"]) == 2
    assert not set(a["mine"]) & set(b["mine"])
    assert sorted(a["mine"] + b["mine"]) == a["all"] == b["all"]
    assert a["every"] and a["every"] == b["every"]
    for r in (a, b):
        for key, value in r["every"].items():
            assert r["split"][key] == pytest.approx(value), key
