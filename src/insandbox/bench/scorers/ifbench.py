"""ifbench: IFBench's instruction checks in loose mode, through the if-verifiable package.

A sample scores 1 when every instruction of its prompt is followed by the response or
one of its loose variants (first/last line dropped, markdown asterisks removed), as
IFBench's own evaluation does. Some checks need NLTK data (sentence tokenizer, stop
words, part-of-speech tagger) that NLTK downloads at first use; where that is not
possible (offline), the checks that could not run are named and the sample is left
unscored rather than scored wrong.
"""
from __future__ import annotations

import contextlib
import io
import json
import re

from ..data import Row
from .base import ScoreResult, strip_thinking


def _registry() -> dict:
    # if-verifiable tries to download NLTK data at import; offline that only prints noise
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        from if_verifiable.ifbench.instructions_registry import INSTRUCTION_DICT
    return INSTRUCTION_DICT


def loose_variants(response: str) -> list[str]:
    from if_verifiable.common import get_loose_transformations

    return get_loose_transformations(response)


class IFBench:
    name = "ifbench"
    method = "IFBench checks, loose (if-verifiable)"
    approximate = False

    def __init__(self):
        try:
            self.registry = _registry()
        except ImportError:
            from ...core.extras import MissingExtra

            raise MissingExtra("the instruct_follow scorer needs if-verifiable (Python >= 3.11): "
                               "pip install 'insandbox[bench]'", name="if_verifiable") from None

    async def score(self, answer: str, row: Row) -> ScoreResult:
        spec = json.loads(row.ground_truth)
        ids = spec["instruction_id_list"]
        kwargs_list = list(spec.get("kwargs") or [])
        kwargs_list += [{}] * (len(ids) - len(kwargs_list))  # never drop an instruction for want of kwargs
        response = strip_thinking(answer)
        if not response.strip():
            return ScoreResult(0.0, "", self.method, {"why": "empty response"})
        variants = [v for v in loose_variants(response) if v.strip()]
        followed, unchecked = {}, {}
        for iid, kwargs in zip(ids, kwargs_list):
            cls = self.registry.get(iid)
            if cls is None:
                unchecked[iid] = "unknown instruction"
                continue
            checker = cls(iid)
            checker.build_description(**{k: v for k, v in (kwargs or {}).items() if v is not None})
            args = checker.get_instruction_args()
            if args and "prompt" in args:
                checker.build_description(prompt=row.problem_statement)
            try:
                followed[iid] = any(checker.check_following(v) for v in variants)
            except LookupError as e:  # NLTK data missing and not downloadable
                found = re.search(r"Resource \x1b\[93m(\w+)|Resource (\w+)", str(e))
                unchecked[iid] = f"missing NLTK data: {next((g for g in found.groups() if g), '?') if found else e}"
        detail = {"followed": followed}
        if unchecked:
            detail["could_not_check"] = unchecked
        if not all(followed.values()):
            return ScoreResult(0.0, response[:300], self.method, detail)
        if unchecked:
            return ScoreResult(None, response[:300], self.method, detail)
        return ScoreResult(1.0, response[:300], self.method, detail)
