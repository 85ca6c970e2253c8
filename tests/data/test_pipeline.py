"""Tests of the prompt pipeline: order, epochs, shards, exact resume, orbax, sources."""

import json
import logging

import numpy as np
import orbax.checkpoint as ocp
import pytest

from rlvr_jax import tasks
from rlvr_jax.data import (
    IteratorRestore,
    IteratorSave,
    JsonlSource,
    TaskSource,
    prompt_batches,
    restore_iterator_state,
    save_iterator_state,
)

N = 10  # source size; with B=4 an epoch ends inside the third batch


def records(n=N):
    return [
        {
            "index": i,
            "id": f"toy/{i}",
            "prompt": f"p{i}",
            "answer": str(i),
            "solution": "",
            "metadata": json.dumps({"i": i}),
        }
        for i in range(n)
    ]


def take(iterator, k):
    return [next(iterator) for _ in range(k)]


def indices(batches):
    return [int(i) for b in batches for i in b.index_B]


def build(**overrides):
    options = dict(batch_size=4, seed=0, shard_index=0, shard_count=1)
    options.update(overrides)
    return prompt_batches(records(), **options)


# --- order -----------------------------------------------------------------------------


def test_same_seed_same_batches_and_different_seeds_differ():
    first = indices(take(build(seed=3), 8))
    assert first == indices(take(build(seed=3), 8))
    assert first != indices(take(build(seed=4), 8))
    # Neighbouring seeds must not replay each other's epochs (grain seeds epoch e with seed + e).
    seed0_epoch1 = indices(take(build(seed=0, batch_size=N), 2))[N:]
    seed1_epoch0 = indices(take(build(seed=1, batch_size=N), 1))
    assert seed0_epoch1 != seed1_epoch0


def test_every_prompt_once_per_epoch_and_epochs_reshuffle():
    batches = take(build(batch_size=4), 3 * N // 2)  # 60 prompts: 6 epochs, batches straddle
    stream = indices(batches)
    epochs = [stream[e * N : (e + 1) * N] for e in range(6)]
    for epoch in epochs:
        assert sorted(epoch) == list(range(N))
    assert len({tuple(e) for e in epochs}) == 6  # a fresh order every epoch
    assert epochs[0] != list(range(N))
    tags = [int(e) for b in batches for e in b.epoch_B]
    assert tags == [p // N for p in range(6 * N)]
    assert all(len(b) == 4 and b.ids == tuple(f"toy/{i}" for i in b.index_B) for b in batches)


def test_no_shuffle_keeps_order_and_finite_epochs_end():
    batches = list(build(shuffle=False, num_epochs=2, batch_size=4, drop_remainder=False))
    assert indices(batches) == list(range(N)) * 2
    assert [len(b) for b in batches] == [4, 4, 4, 4, 4]
    kept = list(build(num_epochs=1, batch_size=4))  # drop_remainder: 10 -> 2 full batches
    assert [len(b) for b in kept] == [4, 4]
    with pytest.raises(ValueError, match="fill no batch"):
        build(num_epochs=1, batch_size=11)


@pytest.mark.parametrize("shuffle", [False, True])
def test_shards_are_disjoint_and_cover_the_source(shuffle):
    def shard(s, **options):
        return indices(build(shard_index=s, shard_count=3, shuffle=shuffle, **options))

    shards = [shard(s, num_epochs=1, batch_size=2, drop_remainder=False) for s in range(3)]
    assert sorted(sum(shards, [])) == list(range(N))  # disjoint, and together the source
    assert [len(s) for s in shards] == [4, 3, 3]
    # Each host keeps its own shard in every epoch.
    assert sorted(shard(1, num_epochs=3, batch_size=1)) == sorted(shards[1] * 3)


def test_default_shard_is_the_jax_process():
    batches = prompt_batches(records(), batch_size=N, seed=0, num_epochs=1)
    assert batches.spec["shard_index"] == 0 and batches.spec["shard_count"] == 1
    assert sorted(indices(batches)) == list(range(N))
    with pytest.raises(ValueError, match="both"):
        prompt_batches(records(), batch_size=2, seed=0, shard_index=0)
    with pytest.raises(ValueError, match="shard_index"):
        build(shard_index=3, shard_count=3)


def test_group_size_is_carried_and_expands_to_rollout_groups():
    batch = next(build(group_size=3))
    assert batch.group_size == 3
    np.testing.assert_array_equal(batch.rollout_groups(), [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3])


# --- resume ----------------------------------------------------------------------------

# k = 1: mid-epoch; k = 3: the last batch taken straddled the epoch end;
# k = 6: two epoch boundaries passed, position inside epoch 2.
RESUME_POINTS = [1, 3, 6]


@pytest.mark.parametrize("k", RESUME_POINTS)
def test_set_state_resumes_with_exactly_the_next_batch(k):
    reference = indices(take(build(), k + 4))
    run = build()
    take(run, k)
    state = json.loads(json.dumps(run.get_state()))  # what a checkpoint stores
    take(run, 2)  # the original keeps going; the saved state must not move
    fresh = build()
    fresh.set_state(state)
    assert indices(take(fresh, 4)) == reference[k * 4 :]


@pytest.mark.parametrize("k", RESUME_POINTS)
def test_orbax_manager_resumes_iterator_with_train_state(tmp_path, k):
    reference = indices(take(build(), k + 3))
    run = build()
    take(run, k)
    train_state = {"w": np.arange(3.0), "step": np.array(k)}
    with ocp.CheckpointManager(tmp_path / "ckpt") as manager:
        manager.save(
            k,
            args=ocp.args.Composite(
                state=ocp.args.StandardSave(train_state), data=IteratorSave(run)
            ),
        )
        take(run, 2)  # advancing before the async save finishes must not leak into it
        manager.wait_until_finished()
    fresh = build()
    with ocp.CheckpointManager(tmp_path / "ckpt") as manager:
        assert manager.latest_step() == k
        restored = manager.restore(
            k,
            args=ocp.args.Composite(
                state=ocp.args.StandardRestore(train_state), data=IteratorRestore(fresh)
            ),
        )
    np.testing.assert_array_equal(restored.state["w"], train_state["w"])
    assert restored.data is fresh
    assert indices(take(fresh, 3)) == reference[k * 4 :]


def test_helpers_save_and_restore_outside_a_manager(tmp_path):
    reference = indices(take(build(), 5))
    run = build()
    take(run, 3)
    save_iterator_state(tmp_path / "data", run)
    assert [p.name for p in (tmp_path / "data").iterdir()] == ["process_0-of-1.json"]
    fresh = restore_iterator_state(tmp_path / "data", build())
    assert indices(take(fresh, 2)) == reference[12:]


def test_state_from_another_pipeline_is_rejected():
    state = build(seed=1).get_state()
    with pytest.raises(ValueError, match="seed"):
        build(seed=2).set_state(state)
    with pytest.raises(ValueError, match="not a prompt_batches"):
        build().set_state({"next_index": 3})


# --- sources ---------------------------------------------------------------------------


def test_task_source_yields_the_tasks_problems_in_order():
    task = tasks.get("countdown")
    source = TaskSource(task, "train", 3)
    assert len(source) == 3
    for i in range(3):
        problem = task.problem(i, "train")
        record = source[i]
        assert record["index"] == i and record["id"] == problem.id
        assert (record["prompt"], record["answer"]) == (problem.prompt, problem.answer)
        assert record["solution"] == problem.solution
        assert json.loads(record["metadata"]) == json.loads(json.dumps(dict(problem.metadata)))
    with pytest.raises(IndexError):
        source[3]
    with pytest.raises(ValueError, match="split"):
        TaskSource(task, "dev", 3)


def test_task_source_batches_verify_like_the_original_problems():
    task = tasks.get("countdown")
    batch = next(prompt_batches(TaskSource(task, "train", 2), batch_size=2, seed=0, shuffle=False))
    for problem in batch.problems():
        original = task.problem(int(problem.id.rsplit("/", 1)[1]), "train")
        for response in (original.solution, "Answer: 1"):
            assert task.verify(problem, response) == task.verify(original, response)


def write(path, lines):
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_jsonl_source_loads_custom_fields(tmp_path):
    path = write(
        tmp_path / "math.jsonl",
        [
            json.dumps({"question": "1+1?", "final": 2, "level": 1}),
            "",  # blank lines are not records
            json.dumps({"question": "2*3?", "final": "6", "level": 2}),
        ],
    )
    source = JsonlSource(path, prompt_field="question", answer_field="final")
    assert len(source) == 2 and source.num_skipped == 0
    assert source[1] == {
        "index": 1,
        "id": "math.jsonl:3",
        "prompt": "2*3?",
        "answer": "6",
        "solution": "",
        "metadata": json.dumps({"level": 2}),
    }
    assert source[0]["answer"] == "2"
    batch = next(prompt_batches(source, batch_size=2, seed=0, shuffle=False))
    assert batch.prompts == ("1+1?", "2*3?")


def test_jsonl_bad_json_names_file_and_line(tmp_path):
    good = json.dumps({"prompt": "p", "answer": "a"})
    path = write(tmp_path / "bad.jsonl", [good, good, '{"prompt": "p", "answer": '])
    with pytest.raises(ValueError, match=r"bad\.jsonl, line 3: invalid JSON"):
        JsonlSource(path)


def test_jsonl_missing_field_names_field_and_line(tmp_path):
    path = write(tmp_path / "f.jsonl", [json.dumps({"q": "p", "answer": "a"})])
    with pytest.raises(ValueError, match=r"f\.jsonl, line 1: missing field 'prompt'"):
        JsonlSource(path)
    path = write(tmp_path / "g.jsonl", [json.dumps({"prompt": "p", "answer": "a"}), "[1, 2]"])
    with pytest.raises(ValueError, match="line 2: expected a JSON object"):
        JsonlSource(path)
    with pytest.raises(ValueError, match="line 1: field 'answer' must be"):
        JsonlSource(write(tmp_path / "h.jsonl", [json.dumps({"prompt": "p", "answer": None})]))


def test_jsonl_skip_mode_counts_and_logs(tmp_path, caplog):
    good = json.dumps({"prompt": "p", "answer": "a"})
    path = write(tmp_path / "mixed.jsonl", [good, "{oops", good, json.dumps({"prompt": "p"})])
    with caplog.at_level(logging.WARNING):
        source = JsonlSource(path, on_error="skip")
    assert len(source) == 2 and source.num_skipped == 2
    assert [r["id"] for r in (source[0], source[1])] == ["mixed.jsonl:1", "mixed.jsonl:3"]
    assert [where for where, _ in source.skipped] == [f"{path}, line 2", f"{path}, line 4"]
    assert "skipped 2 malformed records" in caplog.text
    with pytest.raises(ValueError, match="no valid records"):
        JsonlSource(write(tmp_path / "none.jsonl", ["{oops"]), on_error="skip")
