"""Benchmarks: scorers on the dev sets, each task end to end in both modes, resume, the report."""
from __future__ import annotations

import pytest

from insandbox.bench.data import Row, load_rows
from insandbox.bench.scorers import make_scorer
from insandbox.bench.scorers.choice import extract_choice, option_letters, read_choice
from insandbox.bench.scorers.choice_reference import reference_letter, reference_verdict
from insandbox.bench.scorers.judge import Judge
from insandbox.bench.tasks import load_task
from insandbox.models import OpenAIChatClient
from tests.bench.rows import IF_GOLD, TASKS, dev_rows, gold_file, gold_reply, wrong_answer
from tests.helpers import shared_data


@pytest.mark.shared_data
@pytest.mark.parametrize("task", [t for t in TASKS if t != "instruct_follow"])
def test_gold_answers_get_full_marks_on_every_dev_row(task, run_async):
    spec = load_task(task)
    scorer = make_scorer(spec.scorer, spec.offline_scorer)

    async def body():
        for row in dev_rows(task):
            for answer in (gold_file(task, row), gold_reply(task, row)):
                result = await scorer.score(answer, row)
                assert result.score == 1.0, (row.id, answer[:80], result)
            assert (await scorer.score(wrong_answer(task, row), row)).score == 0.0, row.id
    run_async(body())


@pytest.mark.shared_data
def test_instruct_follow_gold_and_unscorable(run_async, monkeypatch):
    rows = {r.id: r for r in dev_rows("instruct_follow")}
    scorer = make_scorer("ifbench")

    async def body():
        for rid, response in IF_GOLD.items():
            assert (await scorer.score(response, rows[rid])).score == 1.0, rid
            assert (await scorer.score("no", rows[rid])).score == 0.0, rid
        import nltk
        monkeypatch.setattr(nltk.data, "path", [str(shared_data() / "nltk_data")])  # no POS tagger there
        result = await scorer.score("Go there now.", rows["ifbench_258"])  # words:start_verb needs the tagger
        assert result.score is None
        assert "averaged_perceptron_tagger" in result.detail["could_not_check"]["words:start_verb"]
    run_async(body())


def test_choice_extraction():
    assert extract_choice("Answer: C") == "C"
    assert extract_choice("I think... the final answer is (B).") == "B"
    assert extract_choice("\\boxed{D}") == "D"
    assert extract_choice("<think>A? no</think>\n\nC") == "C"
    assert extract_choice('{"answer": "E"}') == "E"
    assert extract_choice("J. Ventricular septal defect") == "J"
    assert extract_choice("I cannot tell") is None
    assert extract_choice("A tough one.\n(C) Ethanol") == "C"


CHEM_LIKE = Row("c1", "Design a molecule.\n\nA. My response is CCO\nB. As for my answer, it is CCN\n"
                     "C. In my opinion, the answer would be C1CC1\nD. I would say c1ccccc1\n\n"
                     'Please show your choice in the answer field with only the choice letter, e.g., "answer": "C".',
                "C")


def test_strict_choice_gives_no_false_credit(run_async):
    """Point h: a SMILES string, a reply that lists the options, a letter outside the options, several letters."""
    scorer = make_scorer("choice")

    async def score(answer, gold="C"):
        return await scorer.score(answer, Row(CHEM_LIKE.id, CHEM_LIKE.problem_statement, gold))

    async def body():
        smiles = await score("F. My answer is C1CC23C(C(C(O)C)C)C2CC3")  # a SMILES string, not the letter C
        assert (smiles.score, smiles.extracted) == (0.0, "") and "not one of the options A-D" in smiles.detail["why"]
        listing = await score("A. foo\nB. bar\nC. baz\nD. qux", gold="D")
        assert (listing.score, listing.extracted) == (0.0, "") and "several options" in listing.detail["why"]
        outside = await score("Answer: E", gold="C")
        assert outside.extracted == "" and "E is not one of the options A-D" in outside.detail["why"]
        several = await score("The answer is C and D.")
        assert several.score == 0.0 and "several letters" in several.detail["why"]
        # the reference extraction credits the first two; its verdict is kept beside the strict one
        assert smiles.detail["extractions"] == {"strict": {"letter": None, "score": 0.0},
                                                "reference": {"letter": "C", "score": 1.0}}
        assert listing.detail["extractions"]["reference"] == {"letter": "D", "score": 1.0}
    run_async(body())


@pytest.mark.parametrize("reply,letter", [
    ("\\boxed{C}", "C"), ("The result: $\\boxed{\\text{B}}$", "B"), ("Answer: (C)", "C"), ("**C**", "C"),
    ("The answer is C.", "C"), ("<think>A? B? Surely D.</think>\n\nThe answer is C.", "C"), ("c", "C"),
    ("answer: c", "C"), ('{"answer": "B"}', "B"), ("**Answer:** D", "D"), ("Answer：A", "A"),
    ("Option B is correct.", "B"), ("C. In my opinion, the answer would be C1CC1", "C"),
    ("It has a ring.\n(C) C1CC1", "C"), ("C\n\nThe ring fits the description.", "C"),
    ("Long reasoning.\nAnswer: B", "B"),
    ("Answer: C\n\nOn second thought the nitrogen matters.\nAnswer: D", "D"),  # a reply concludes at its end
    ("C and D", None), ("Answer: B or C", None), ("\\boxed{A, B}", None),
    ("The answer is a molecule with a ring.", None),  # "a" is a word here, not option A
    ("Answer: C1CC1", None), ("\\boxed{C1CC1}", None), ("I cannot tell", None), ("<think>C", None),
    ("A. foo\nB. bar", None), ("Z", None), ("Answer: I think B", None),
])
def test_strict_choice_reads_the_usual_forms(reply, letter):
    assert read_choice(reply, "ABCD").letter == letter, read_choice(reply, "ABCD")


def test_strict_choice_keeps_the_letters_it_saw_stated():
    reading = read_choice("Answer: C\nHmm.\nAnswer: D", "ABCD")
    assert (reading.letter, reading.stated) == ("D", ["C", "D"])


def test_option_letters_from_the_question():
    assert option_letters(CHEM_LIKE) == ("ABCD", "question")
    inline = Row("b", "Which?\nAnswer Choices: (A) Dopamine (B) Furosemide (C) Milrinone (D) Epinephrine "
                      "(E) Norepinephrine (F) Vasopressin (G) Phenylephrine (H) Dobutamine (I) Hydrocortisone "
                      "(J) Amiodarone", "D")
    assert option_letters(inline) == ("ABCDEFGHIJ", "question")
    stray = Row("s", "A. thaliana grows fast. Which gene?\nA. FLC\nB. FT\nC. CO", "B")  # a line that is no option
    assert option_letters(stray)[0] == "ABC"
    assert option_letters(Row("f", "Which?", "B", extra={"options": ["x", "y", "z"]})) == ("ABC", "row field")
    assert option_letters(Row("n", "Pick the right letter.", "B"))[0] is None


def test_strict_choice_without_recognisable_options_accepts_any_letter(run_async):
    async def body():
        scorer = make_scorer("choice")
        result = await scorer.score("Answer: F", Row("n", "Pick the right letter.", "F"))
        assert result.score == 1.0 and result.detail["options_from"] == "none found in the question"
        misread = await scorer.score("Answer: F", Row("m", "Options:\nA. x\nB. y", "F"))  # gold outside: misread
        assert misread.score == 1.0 and "not among the options read" in misread.detail["options_from"]
    run_async(body())


@pytest.mark.shared_data
@pytest.mark.parametrize("task", ["chem", "biomed"])
def test_option_letters_of_every_dev_row(task):
    letters = {"chem": "ABCD", "biomed": "ABCDEFGHIJ"}[task]
    for row in dev_rows(task):
        assert option_letters(row) == (letters, "question"), row.id


@pytest.mark.parametrize("reply,letter", [
    ('x "answer": "b" then Answer: C', "B"),  # 1. the JSON form first
    ("Answer: C\nAnswer: D", "C"),  # 2. the first "answer: X"
    ("so the answer is D. Choice is A", "D"),  # 3. first "answer/choice is X"
    ("we get \\boxed{b} and \\boxed{12}", "B"),  # 4. the last boxed, "12", has no letter; 5. the "B" of "{B}"
    ("\\boxed{d} at last", "D"),  # 4. the last boxed's first character
    ("A. foo\nB. bar\nC. baz\nD. qux", "D"),  # 5. the last standalone letter
    ("F. My answer is C1CC23C(C(C(O)C)C)C2CC3", "C"),  # 5. "(C)" in the SMILES
    ("xyz", "X"), ("  42", ""),  # 6. the first character when it is a letter
    ("<think>Answer: A?</think>\nB", "A"),  # the thinking is read too
])
def test_reference_extraction_follows_the_reference_rules(reply, letter):
    assert reference_letter(reply) == letter


def test_reference_verdict():
    assert reference_verdict("  c ", "C") == (1.0, "C")  # the whole answer is the gold
    assert reference_verdict("I would pick B", "B") == (1.0, "B")
    assert reference_verdict("Answer: C1CC", "A") == (1.0, "A")  # no letter until 6.: the "A" of "Answer"
    assert reference_verdict("", "A") == (0.0, "")


def test_reference_scorer_is_named_and_keeps_the_strict_verdict(run_async):
    async def body():
        scorer = make_scorer("choice-reference")
        assert scorer.name == "choice-reference" and "reference" in scorer.method
        result = await scorer.score("A. foo\nB. bar\nC. baz\nD. qux", Row(CHEM_LIKE.id, CHEM_LIKE.problem_statement,
                                                                            "D"))
        assert (result.score, result.extracted) == (1.0, "D")
        assert result.detail["extractions"]["strict"] == {"letter": None, "score": 0.0}
    run_async(body())


@pytest.mark.shared_data
def test_judge_scores_by_verdict(scripted, run_async):
    row = load_rows(shared_data() / "bench" / "physics" / "dev.jsonl", None, None, limit=1)[0]
    srv = scripted({"scripts": [
        {"match": "ANSWER-RIGHT", "llm_turns": [{"content": "Same value. CORRECT"}]},
        {"match": "ANSWER-WRONG", "llm_turns": [{"content": "It is CORRECT in form but the value is INCORRECT"}]},
        {"match": "ANSWER-VAGUE", "llm_turns": [{"content": "hmm"}, {"content": "hmm"}]}]})

    async def body():
        judge = Judge(OpenAIChatClient("judge", base_url=srv.url))
        assert (await judge.score("ANSWER-RIGHT", row)).score == 1.0
        assert (await judge.score("ANSWER-WRONG", row)).score == 0.0
        vague = await judge.score("ANSWER-VAGUE", row)
        assert vague.score is None and vague.detail["why"] == "no verdict"
        sent = srv.requests[0]["messages"][0]["content"]
        assert row.ground_truth in sent and "ANSWER-RIGHT" in sent and row.problem_statement[:50] in sent
        await judge.client.close()
    run_async(body())



def test_the_math_scorer_without_math_verify_refuses_to_start(monkeypatch):
    """Regression: without math-verify every answer was "a parser crash", scored 0 as wrong."""
    import sys

    monkeypatch.setitem(sys.modules, "math_verify", None)  # as on an install without the bench extra
    with pytest.raises(ModuleNotFoundError):
        make_scorer("math")
