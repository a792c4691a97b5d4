"""GGUF export round trip: the embedded SmolLM2 GGUF, dequantised into transformers and saved as a
checkpoint the way training saves one, exported with llama.cpp's converter, loaded in llama.cpp:
the same greedy tokens from the same prompt ids (f32), and the turn end as the GGUF's EOS.
Needs no Docker; the converter comes from the llama-cpp-python sources (fetched once, then cached)."""
from __future__ import annotations

import json

import pytest

from insandbox.rl.trainers.export import _stage, compare_greedy
from tests.helpers import cli


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    from insandbox.rl.rollout.chat import ChatFormat
    from insandbox.rl.trainers.config import TrainConfig
    from insandbox.rl.trainers.policy import align_turn_end, load_policy_model

    model, tokenizer = load_policy_model(TrainConfig())  # the embedded GGUF
    stops = ChatFormat(tokenizer, []).stop_token_ids
    align_turn_end(model, tokenizer, stops)
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.pad_token_id is not None  # the GGUF said <|im_start|>
    folder = tmp_path_factory.mktemp("checkpoint")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_exported_gguf_gives_the_checkpoints_greedy_tokens(checkpoint, tmp_path):
    import gguf

    out = tmp_path / "smoke.gguf"
    r = cli("rl", "export", str(checkpoint), "--out", str(out), "--outtype", "f32", timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    assert out.is_file() and not out.with_name("smoke.gguf.part").exists()
    line = next(x for x in r.stdout.splitlines() if "greedy tokens" in x)
    agree, total = line.split(": ")[1].split(" ")[0].split("/")
    assert agree == total and int(total) > 0, line
    found = compare_greedy(checkpoint, out)  # the same through the API, token lists in hand
    assert found.same and found.transformers_ids
    reader = gguf.GGUFReader(str(out))
    eos = reader.fields["tokenizer.ggml.eos_token_id"]
    assert int(eos.parts[eos.data[0]][0]) == 2  # <|im_end|>: llama.cpp stops where a turn ends
    pre = reader.fields["tokenizer.ggml.pre"]
    assert bytes(pre.parts[pre.data[0]]).decode() == "smollm"  # the byte-level BPE, recognised


def test_staging_drops_the_byte_fallback_of_gguf_converted_tokenizers(tmp_path):
    source, staged = tmp_path / "ckpt", tmp_path / "staged"
    source.mkdir()
    staged.mkdir()
    (source / "config.json").write_text("{}")
    spec = {"model": {"type": "BPE", "byte_fallback": True, "vocab": {"a": 0}},
            "pre_tokenizer": {"type": "ByteLevel"}, "decoder": {"type": "Sequence", "decoders": []}}
    (source / "tokenizer.json").write_text(json.dumps(spec))
    _stage(source, staged)
    written = json.loads((staged / "tokenizer.json").read_text())
    assert written["model"]["byte_fallback"] is False and written["decoder"]["type"] == "ByteLevel"
    assert (staged / "config.json").is_symlink() and json.loads((source / "tokenizer.json").read_text()) == spec
    spec["pre_tokenizer"] = {"type": "Metaspace"}  # a sentencepiece-style BPE keeps its fallback
    (source / "tokenizer.json").write_text(json.dumps(spec))
    (staged / "tokenizer.json").unlink()
    (staged / "config.json").unlink()
    _stage(source, staged)
    assert json.loads((staged / "tokenizer.json").read_text()) == spec
