"""Issue 22, the rewards tried as a model under training would game them: for every reward mode, an
attack (hedging, breaking the sandbox) never scores above an honest wrong answer; correct answers in
other scripts' digits, full-width letters or with invisible characters score 1; and the numbers the
manual's reward table (docs/rl/rewards.md) gives, checked here."""
from __future__ import annotations

import pytest

from insandbox.rl.rewards import Outcome, RewardConfig, compute_reward_sync
from insandbox.rl.schema import TaskRow


def task(**fields) -> dict:
    base = {"id": "t", "problem_statement": "Read /testbed/documents.", "ground_truth": "Paris", "input_files": {}}
    return TaskRow(**{**base, **fields}).as_record()


MULTI = task(qa_type="multi-choice", ground_truth="A,C", options=["A", "B", "C", "D", "E"])
MULTI3 = task(qa_type="multi-choice", ground_truth="A,C,E", options=["A", "B", "C", "D", "E"])
SINGLE = task(qa_type="single-choice", ground_truth="C", options=["A", "B", "C", "D"])
OPEN = task(aliases=["City of Paris"])
TWO_WORDS = task(ground_truth="New York")
NUMBER = task(ground_truth="3", answer_type="number")
STRICT, F1 = RewardConfig(), RewardConfig(multi_choice="f1", open="f1")
PAPER = RewardConfig(scoring="paper")
MODES = {"strict": STRICT, "f1": F1}  # the modes that must not pay for hedging (paper pays, as published)


def value(row, answer, config=STRICT, exit_reason="submitted", **outcome) -> float:
    result = compute_reward_sync(row, Outcome(answer, exit_reason, **outcome), config)
    assert result.error is None, result.error
    return result.value


HONEST_WRONG = {"multi": (MULTI, "B, D"), "open": (OPEN, "Lyon"), "number": (NUMBER, "4"), "single": (SINGLE, "B")}
ATTACKS = [
    ("multi", "A, B, C, D, E"),  # select every option (plain set F1: 0.57)
    ("multi", "A, C, D"),  # the right set and one more
    ("open", "Paris or Lyon"),  # several guesses (token F1: 0.67)
    ("open", "Paris, Lyon, Marseille"),
    ("open", "Paris\nLyon"),
    ("open", "Paris / Lyon"),
    ("open", "Paris; Lyon"),
    ("open", "\\boxed{Paris} or \\boxed{Lyon}"),
    ("number", "2 \\lor 3"),  # a logical or: math-verify read it as its last value (1 before)
    ("number", "x=2 \\lor x=3"),
    ("number", "4 \\land 3"),
    ("number", "2 \\vee 3"),
    ("number", "2 \\wedge 3"),
    ("number", "2 \\cup 3"),
    ("number", "$2 \\lor 3$"),
    ("number", "\\boxed{2} \\lor \\boxed{3}"),  # two boxes: the last one alone used to win
    ("number", "\\boxed{2}, \\boxed{3}"),
    ("number", "2 or 3"),
    ("single", "A B C D"),
    ("single", "A or C"),
    # issue 32: hedges joined otherwise, and values math-verify read as their last
    ("open", "Paris oder Lyon"), ("open", "Paris ou Lyon"), ("open", "Paris 或 Lyon"), ("open", "Paris\tLyon"),
    ("open", "Paris - Lyon"), ("open", "Paris (Lyon)"), ("open", "Paris \\ Lyon"), ("open", "Paris + Lyon"),
    ("open", "Paris -> Lyon"), ("open", "Paris или Lyon"), ("open", "巴黎或里昂"),
    ("number", "2 ∨ 3"), ("number", "2 | 3"), ("number", "2 \\mid 3"), ("number", "2 \\to 3"), ("number", "±3"),
    ("number", "3または2"), ("number", "\\boxed{2} → \\boxed{3}"), ("number", "–3"), ("number", "‐3"),
]


@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("kind, attack", ATTACKS)
def test_no_attack_scores_above_an_honest_wrong_answer(mode, kind, attack):
    row, honest = HONEST_WRONG[kind]
    config = MODES[mode]
    assert value(row, attack, config) <= value(row, honest, config) == 0.0


@pytest.mark.parametrize("gold, partial, options", [
    ("A,C", "A", "ABCDE"), ("A,C,E", "A", "ABCDE"), ("A,B,C,D", "B", "ABCDE"), ("B,C", "C", "ABCD"),
])
def test_select_all_never_beats_an_honest_partial_answer(gold, partial, options):
    """Plain set F1 let select-all beat a one-letter answer whenever options >= right letters squared
    (3 right of 5: 0.75 against 0.5); now any wrong letter scores 0."""
    row = task(qa_type="multi-choice", ground_truth=gold, options=list(options))
    select_all = ", ".join(options)
    assert value(row, select_all, F1) == 0.0 < value(row, partial, F1)


def test_extra_words_lower_f1_and_never_beat_the_right_answer():
    """"Right + garbage" is F1's own business: lower than the right answer, and 0 in exact mode."""
    assert value(OPEN, "Paris banana", F1) == pytest.approx(2 / 3)  # p 1/2, r 1
    assert value(TWO_WORDS, "New York banana", F1) == pytest.approx(0.8)  # the 0.8: p 2/3, r 1
    assert value(OPEN, "Paris banana", STRICT) == 0.0
    assert value(OPEN, "Paris", F1) == value(TWO_WORDS, "New York", F1) == 1.0


def test_a_separator_the_reference_holds_is_no_hedge():
    row = task(ground_truth="salt and pepper")
    assert value(row, "Salt and pepper") == 1.0
    assert value(row, "salt or pepper") == 0.0


@pytest.mark.parametrize("row, answer", [
    (OPEN, "Par\u200bis"),  # a zero-width space inside the word
    (OPEN, "\ufeffParis\u200d"),  # a byte-order mark, a zero-width joiner
    (OPEN, "Ｐａｒｉｓ"),  # full-width letters
    (task(ground_truth="42", answer_type="number"), "٤٢"),  # Arabic-Indic digits
    (task(ground_truth="42", answer_type="number"), "۴۲"),  # Extended Arabic-Indic (Persian) digits
    (task(ground_truth="42", answer_type="number"), "४२"),  # Devanagari digits
    (task(ground_truth="3.5", answer_type="number"), "٣٫٥"),  # with the Arabic decimal separator
    (task(ground_truth="1000", answer_type="number"), "١٬٠٠٠"),  # and its thousands separator
    (task(ground_truth="42", answer_type="number"), "４２"),  # full-width digits
    (SINGLE, "Ｃ"),  # a full-width choice letter
    (SINGLE, "C\u200b"),
    (MULTI, "Ａ，Ｃ"),  # full-width letters and comma
    (MULTI, "A,\u200bC"),
])
@pytest.mark.parametrize("mode", ["strict", "f1", "paper"])
def test_correct_answers_in_other_forms_score_one(row, answer, mode):
    assert value(row, answer, {"strict": STRICT, "f1": F1, "paper": PAPER}[mode]) == 1.0


SMOKE = RewardConfig(no_answer_penalty=-0.25, max_steps_penalty=-0.25, truncation_penalty=-0.5)


@pytest.mark.parametrize("config", [STRICT, F1, PAPER, SMOKE], ids=["strict", "f1", "paper", "smoke penalties"])
def test_a_broken_sandbox_gets_the_worst_ending(config):
    """Breaking the sandbox (the rollout runner's exit_cause "sandbox") scored 0 with the smoke preset,
    above giving up (-0.25) and running out of steps (-0.5). Now: the sum of the negative penalties,
    whatever the answer file said, so never above an honest wrong answer or any other ending."""
    broken = compute_reward_sync(OPEN, Outcome("Paris", "sandbox_error", exit_cause="sandbox"), config)
    assert broken.detail["broken_sandbox"] is True and broken.correct == 0.0
    endings = [Outcome("Lyon", "submitted"), Outcome(None, "submitted"), Outcome(None, "max_steps"),
               Outcome(None, "max_steps", truncated=True), Outcome(None, "context_length", truncated=True)]
    worst = min(value(OPEN, o.answer, config, o.exit_reason, truncated=o.truncated) for o in endings)
    assert broken.value <= worst and broken.value <= 0.0
    if config is SMOKE:
        assert broken.value == -1.0 and worst == -1.0  # no answer, out of steps and truncated: all three


def test_the_broken_sandbox_penalty_can_be_harsher_never_milder():
    harsh = RewardConfig(no_answer_penalty=-0.25, broken_sandbox_penalty=-2.0)
    mild = RewardConfig(no_answer_penalty=-0.25, broken_sandbox_penalty=-0.1)
    outcome = Outcome(None, "sandbox_error", exit_cause="sandbox")
    assert compute_reward_sync(OPEN, outcome, harsh).value == -2.0
    assert compute_reward_sync(OPEN, outcome, mild).value == -0.25
    with pytest.raises(ValueError):
        RewardConfig(broken_sandbox_penalty=0.5)
    # an engine's sandbox_error (no cause, or "infrastructure") is no penalty: the runner masks it instead
    engine = compute_reward_sync(OPEN, Outcome("Paris", "sandbox_error", exit_cause="infrastructure"), SMOKE)
    assert engine.value == 1.0 and engine.detail["exit_failure"] is True


# the manual's reward table (docs/rl/rewards.md), mode by mode (MULTI: 2 right of 5 options)
@pytest.mark.parametrize("row, answer, strict, f1, paper", [
    (MULTI, "A, C", 1.0, 1.0, 1.0),
    (MULTI, "A", 0.0, 2 / 3, 2 / 3),  # an honest partial answer
    (MULTI, "A, B, C, D, E", 0.0, 0.0, 4 / 7),  # select-all
    (MULTI, "A, C, D", 0.0, 0.0, 0.8),  # the right set and one more
    (MULTI, "B, D", 0.0, 0.0, 0.0),  # an honest wrong answer
    (OPEN, "Paris or Lyon", 0.0, 0.0, 0.5),  # several guesses
    (OPEN, "Paris, Lyon, Marseille", 0.0, 0.0, 0.5),
    (OPEN, "Paris banana", 0.0, 2 / 3, 2 / 3),  # the right answer and a garbage word
    (NUMBER, "2 \\lor 3", 0.0, 0.0, 0.5),
    (SINGLE, "A B C D", 0.0, 0.0, 0.0),
    # issue 32
    (OPEN, "Paris oder Lyon", 0.0, 0.0, 0.5),  # a hedge joined by a connective of another language
    (OPEN, "Paris (Lyon)", 0.0, 0.0, 2 / 3),  # or by any separator
    (NUMBER, "2 ∨ 3", 0.0, 0.0, 2 / 3),  # values joined by a sign: math-verify never sees them
    (NUMBER, "–3", 0.0, 0.0, 1.0),  # the wrong sign, with a dash: ROUGE-L drops signs (official)
    (task(qa_type="multi-choice", ground_truth="B", options=["A", "B", "C"]), "A, B", 0.0, 0.0, 0.0),
])
def test_the_readme_table(row, answer, strict, f1, paper):
    assert value(row, answer, STRICT) == pytest.approx(strict)
    assert value(row, answer, F1) == pytest.approx(f1)
    assert value(row, answer, PAPER) == pytest.approx(paper)


def test_paper_scoring_is_the_official_reward_and_is_not_the_default():
    assert RewardConfig().scoring == "strict"
    assert value(MULTI3, "A, B, C, D, E", PAPER) == pytest.approx(0.75)  # it pays for hedging, as published
    assert value(MULTI3, "A", PAPER) == pytest.approx(0.5)
    assert value(NUMBER, "\\frac{6}{2}", PAPER) == 1.0  # math-verify first
    assert value(task(ground_truth="the Eiffel Tower"), "Eiffel towers", PAPER) == pytest.approx(0.8)  # ROUGE-L
    with pytest.raises(ValueError, match="fixes how every qa_type"):
        RewardConfig(scoring="paper", open="f1")
