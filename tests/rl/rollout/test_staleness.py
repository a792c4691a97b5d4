"""Staleness drops: records past the bound, and those whose version is unknown, never reach the loss."""
from insandbox.rl.rollout import RolloutRecord, split_stale
from insandbox.rl.rollout.token_client import TokenRecord


def record(version, name="r"):
    return RolloutRecord(id=name, task_id="t", prompt_ids=[1], response_ids=[2], response_mask=[1],
                         policy_version=version)


def test_records_past_the_bound_and_unversioned_ones_are_dropped_and_counted():
    records = [record(5, "now"), record(4, "one"), record(3, "two"), record(None, "unknown")]
    split = split_stale(records, current=5, bound=1)
    assert [r.id for r in split.fresh] == ["now", "one"]
    assert [r.id for r in split.stale] == ["two"]
    assert [r.id for r in split.unversioned] == ["unknown"]
    assert split.dropped == 2
    assert split.counts() == {"kept": 2, "dropped_stale": 1, "dropped_unversioned": 1}


def test_no_bound_keeps_everything():
    records = [record(0), record(None)]
    assert split_stale(records, current=100, bound=None).fresh == records


def test_a_record_takes_the_oldest_version_of_its_turns_and_none_when_one_is_unknown():
    rec = TokenRecord(policy_versions=[3, 2, 4])
    assert rec.policy_version == 2
    assert TokenRecord(policy_versions=[3, None]).policy_version is None
    assert TokenRecord().policy_version is None


def test_logprobs_hold_one_value_per_model_token():
    r = RolloutRecord(id="a", task_id="a", prompt_ids=[1], response_ids=[5, 6, 7, 8], response_mask=[1, 0, 0, 1],
                      response_logprobs=[-0.5, None, None, -1.5])
    assert r.logprobs == [-0.5, -1.5]
    assert '"logprobs":[-0.5,-1.5]' in r.model_dump_json()
    assert RolloutRecord.model_validate_json(r.model_dump_json()) == r
