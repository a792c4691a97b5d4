"""GGUF export round trip: the embedded SmolLM2 GGUF, dequantised into transformers and saved as a
checkpoint the way training saves one, exported with llama.cpp's converter, loaded in llama.cpp:
the same greedy tokens from the same prompt ids (f32), and the turn end as the GGUF's EOS.
Needs no Docker; the converter comes from the llama-cpp-python sources (fetched once, then cached).
Two exports at once share a fresh converter cache, fed by a package index of the test's own."""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

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


# a stand-in for llama.cpp's converter: writes the file it is asked for
STAND_IN_CONVERTER = """import sys
out = sys.argv[sys.argv.index("--outfile") + 1]
open(out, "wb").write(b"GGUF stand-in")
"""


def _sdist(version: str) -> bytes:
    """llama-cpp-python VERSION's source archive as pip sees one: metadata, and the vendored converter."""
    files = {"pyproject.toml": f'[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'
                               f'[project]\nname = "llama_cpp_python"\nversion = "{version}"\n',
             "PKG-INFO": f"Metadata-Version: 2.1\nName: llama_cpp_python\nVersion: {version}\n",
             "vendor/llama.cpp/convert_hf_to_gguf.py": STAND_IN_CONVERTER,
             "vendor/llama.cpp/gguf-py/gguf/__init__.py": ""}
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"llama_cpp_python-{version}/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


class _Index(ThreadingHTTPServer):
    """A find-links page with the archive on it. The archive is handed out only once two downloads have
    asked for it, so both exports are fetching before either puts its converter in the cache."""

    def __init__(self, archive_name: str, archive: bytes):
        self.archive_name, self.archive, self.downloads = archive_name, archive, 0
        self.together = threading.Barrier(2, timeout=120)  # a guard against hanging, never reached when it works
        super().__init__(("127.0.0.1", 0), _IndexHandler)


class _IndexHandler(BaseHTTPRequestHandler):
    def do_GET(self):
        srv: _Index = self.server
        if self.path.rstrip("/").endswith(srv.archive_name):
            srv.downloads += 1
            try:
                srv.together.wait()
            except threading.BrokenBarrierError:
                pass
            body, kind = srv.archive, "application/gzip"
        else:
            body, kind = f'<html><body><a href="{srv.archive_name}">{srv.archive_name}</a></body></html>'.encode(), \
                "text/html"
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_two_exports_at_once_share_a_fresh_converter_cache(tmp_path):
    """Regression: both fetched the converter and renamed their staging folder onto the same cache folder;
    the second failed (Directory not empty). Now the first rename wins and the other uses its converter."""
    from insandbox.rl.trainers.export import llama_cpp_version

    version = llama_cpp_version()
    name = f"llama_cpp_python-{version}.tar.gz"
    index = _Index(name, _sdist(version))
    threading.Thread(target=index.serve_forever, daemon=True).start()
    checkpoint = tmp_path / "checkpoint"
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text("{}")
    cache = tmp_path / "cache"
    exe = Path(sys.executable).parent / "insandbox"
    procs = []
    try:
        for i in range(2):
            env = {**os.environ, "INSANDBOX_CONVERTER_CACHE": str(cache), "PIP_NO_INDEX": "1",
                   "PIP_FIND_LINKS": f"http://127.0.0.1:{index.server_port}/",
                   "PIP_CACHE_DIR": str(tmp_path / f"pip{i}"), "PIP_DISABLE_PIP_VERSION_CHECK": "1",
                   "PIP_NO_BUILD_ISOLATION": "0"}  # --no-build-isolation: the installed setuptools, no index
            argv = [str(exe), "rl", "export", str(checkpoint), "--out", str(tmp_path / f"{i}.gguf"), "--no-check"]
            procs.append(subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        done = [p.communicate(timeout=600) for p in procs]
    finally:
        index.shutdown()
    for p, (out, err) in zip(procs, done):
        assert p.returncode == 0, err[-3000:]
        assert "[export]" in out
    assert index.downloads == 2  # both fetched at once: the race is real
    for i in range(2):
        assert (tmp_path / f"{i}.gguf").read_bytes() == b"GGUF stand-in"
    assert [p.name for p in cache.iterdir()] == [version]  # one converter, no staging folder left behind
    assert (cache / version / "convert_hf_to_gguf.py").read_text() == STAND_IN_CONVERTER
